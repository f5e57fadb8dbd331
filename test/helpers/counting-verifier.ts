import { createJwtVerifier, type JwtVerifier } from "../../src/identity/jwt-verifier.ts";
import { createIdpServer, type IdpServer } from "../../src/servers/idp/server.ts";

/** The development IdP on an ephemeral port, and a verifier over its JWKS that counts its verifications. */
export interface CountingVerifier {
  readonly idp: IdpServer;
  readonly issuer: string;
  readonly verifier: JwtVerifier;
  /** Tokens verified so far (cache hits do not reach the verifier). */
  readonly verifications: number;
  close(): Promise<void>;
}

export async function startCountingVerifier(): Promise<CountingVerifier> {
  const idp = await createIdpServer({ audience: "authority" });
  const issuer = await idp.listen();
  const real = createJwtVerifier({
    issuer,
    audience: "authority",
    jwks: `${issuer}/.well-known/jwks.json`,
    clockToleranceSec: 0,
  });
  let verifications = 0;
  return {
    idp,
    issuer,
    verifier: {
      issuer,
      verify: (token) => {
        verifications++;
        return real.verify(token);
      },
    },
    get verifications() {
      return verifications;
    },
    close: () => idp.close(),
  };
}
