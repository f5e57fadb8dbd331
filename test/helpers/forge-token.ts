/**
 * Tokens an attacker (or a broken issuer) would present: signed with the real issuer's key
 * but with bad claims, signed with a key the issuer never published, unsigned (`alg:
 * none`), or HMAC-signed with the issuer's *public* key (the RS/ES → HS confusion).
 *
 *   const forge = tokenForge(idp.server());
 *   await forge.signed({ exp: past })          // the real key and kid, claims overridden
 *   await forge.withUnknownKey()               // a valid-looking token from another key
 *   forge.unsigned(); forge.hmacWithPublicKey()
 */
import {
  createHmac,
  createPublicKey,
  generateKeyPairSync,
  type KeyObject,
  randomBytes,
  sign as signBytes,
} from "node:crypto";
import { type JWTPayload, SignJWT } from "jose";
import type { IdpServer } from "../../src/servers/idp/index.ts";

export interface TokenForge {
  /** Claims a valid token of this issuer would carry (for `sub`). */
  baseClaims(subject: string): JWTPayload;
  /** Signed with the issuer's current key and kid; `claims` replace (undefined removes) base claims. */
  signed(
    subject: string,
    claims?: Record<string, unknown>,
    header?: Record<string, unknown>,
  ): Promise<string>;
  /** Signed by a fresh key the issuer never published, under `kid`. */
  withUnknownKey(subject: string, kid?: string): Promise<string>;
  /** Signed by a fresh key that the header itself carries (`jwk`) or points at (`jku`). */
  withAttackerKeyHeader(subject: string, how: "jwk" | "jku"): Promise<string>;
  /** `alg: none`, empty signature. */
  unsigned(subject: string): string;
  /** HS256 with the issuer's public key (PEM, and JWK JSON) as the HMAC secret. */
  hmacWithPublicKey(subject: string, keyForm?: "pem" | "jwk"): string;
}

const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString("base64url");

/** ES256 by hand, so headers a library would refuse to produce (unknown `crit`) can be signed. */
function signEs256(header: Record<string, unknown>, payload: unknown, key: KeyObject): string {
  const input = `${b64(header)}.${b64(payload)}`;
  const signature = signBytes("sha256", Buffer.from(input), { key, dsaEncoding: "ieee-p1363" });
  return `${input}.${signature.toString("base64url")}`;
}

export function tokenForge(
  server: IdpServer,
  options: { audience?: string; tenant?: string } = {},
): TokenForge {
  const baseClaims = (subject: string): JWTPayload => {
    const now = Math.floor(Date.now() / 1000);
    return {
      iss: server.issuer,
      sub: subject,
      aud: options.audience ?? "authority",
      iat: now,
      nbf: now,
      exp: now + 600,
      jti: randomBytes(8).toString("hex"),
      scope: "",
      token_use: "access",
      ...(options.tenant === undefined ? {} : { tenant: options.tenant }),
    };
  };
  const merged = (subject: string, claims: Record<string, unknown>): JWTPayload => {
    const out: Record<string, unknown> = { ...baseClaims(subject) };
    for (const [name, value] of Object.entries(claims)) {
      if (value === undefined) delete out[name];
      else out[name] = value;
    }
    return out as JWTPayload;
  };
  const publicJwk = () => {
    const key = server.keys.current();
    const jwk = createPublicKey(key.privateKey).export({ format: "jwk" });
    return { jwk, kid: key.kid };
  };
  return {
    baseClaims,
    async signed(subject, claims = {}, header = {}) {
      const key = server.keys.current();
      return signEs256(
        { alg: "ES256", kid: key.kid, typ: "at+jwt", ...header },
        merged(subject, claims),
        key.privateKey,
      );
    },
    async withUnknownKey(subject, kid = `unknown-${randomBytes(4).toString("hex")}`) {
      const { privateKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
      return new SignJWT(baseClaims(subject))
        .setProtectedHeader({ alg: "ES256", kid, typ: "at+jwt" })
        .sign(privateKey);
    },
    async withAttackerKeyHeader(subject, how) {
      const { privateKey, publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
      const kid = `attacker-${randomBytes(4).toString("hex")}`;
      const jwk = { ...publicKey.export({ format: "jwk" }), kid, alg: "ES256", use: "sig" };
      const header =
        how === "jwk"
          ? { jwk }
          : { jku: `http://127.0.0.1:9/${kid}/jwks.json`, x5u: "http://127.0.0.1:9/cert.pem" };
      return new SignJWT(baseClaims(subject))
        .setProtectedHeader({ alg: "ES256", kid, typ: "at+jwt", ...header })
        .sign(privateKey);
    },
    unsigned(subject) {
      const { kid } = publicJwk();
      return `${b64({ alg: "none", kid, typ: "at+jwt" })}.${b64(baseClaims(subject))}.`;
    },
    hmacWithPublicKey(subject, keyForm = "pem") {
      const { jwk, kid } = publicJwk();
      const secret =
        keyForm === "pem"
          ? createPublicKey({ key: jwk, format: "jwk" }).export({ format: "pem", type: "spki" }).toString()
          : JSON.stringify(jwk);
      const input = `${b64({ alg: "HS256", kid, typ: "at+jwt" })}.${b64(baseClaims(subject))}`;
      return `${input}.${createHmac("sha256", secret).update(input).digest("base64url")}`;
    },
  };
}

interface TokenParts {
  readonly header: Record<string, unknown>;
  readonly payload: Record<string, unknown>;
  readonly signature: string;
}

function parts(token: string): TokenParts {
  const [header = "", payload = "", signature = ""] = token.split(".");
  return {
    header: JSON.parse(Buffer.from(header, "base64url").toString("utf8")) as Record<string, unknown>,
    payload: JSON.parse(Buffer.from(payload, "base64url").toString("utf8")) as Record<string, unknown>,
    signature,
  };
}

/** The claims of a real token (no verification). */
export function claimsOf(token: string): Record<string, unknown> {
  return parts(token).payload;
}

/** A real token with claims changed and its original signature kept (a tampered payload). */
export function tamperedCopy(token: string, claims: Record<string, unknown>): string {
  const { header, payload, signature } = parts(token);
  return `${b64(header)}.${b64({ ...payload, ...claims })}.${signature}`;
}

/** A real token's claims, unsigned (`alg: none`). */
export function unsignedCopy(token: string): string {
  const { header, payload } = parts(token);
  return `${b64({ ...header, alg: "none" })}.${b64(payload)}.`;
}

/** A real token's claims, HS256-signed with a published public key (JWK) as the secret. */
export function hmacCopy(
  token: string,
  publicJwk: Record<string, unknown>,
  keyForm: "pem" | "jwk" = "pem",
): string {
  const { header, payload } = parts(token);
  const secret =
    keyForm === "pem"
      ? createPublicKey({ key: publicJwk, format: "jwk" }).export({ format: "pem", type: "spki" }).toString()
      : JSON.stringify(publicJwk);
  const input = `${b64({ ...header, alg: "HS256" })}.${b64(payload)}`;
  return `${input}.${createHmac("sha256", secret).update(input).digest("base64url")}`;
}

/** A real token's claims re-signed by a fresh key, under `kid` (default: the original kid). */
export async function resignedCopy(token: string, header: Record<string, unknown> = {}): Promise<string> {
  const original = parts(token);
  const { privateKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  return new SignJWT(original.payload as JWTPayload)
    .setProtectedHeader({ ...original.header, alg: "ES256", ...header })
    .sign(privateKey);
}
