import { isIP } from "node:net";
import { setFlagsFromString } from "node:v8";
import { exportJWK, generateKeyPair, SignJWT } from "jose";
import { CapabilityError, validateCapability } from "../../core/capability.ts";
import {
  POLICY_SCHEMA_V1,
  POLICY_SCHEMA_V2,
  PolicyDocumentError,
  validatePolicyDocument,
} from "../../core/index.ts";
import { generateSigKeyPair, sign, verify } from "../../crypto/index.ts";
import { validateInput } from "../../execute/input.ts";
import { createJwtVerifier } from "../../identity/jwt-verifier.ts";
import { parseCheckRequest } from "./grpc/check-input.ts";
import { allowResponse, denyResponse } from "./grpc/check-response.ts";
import { loadProtos } from "./grpc/proto.ts";

/**
 * Runs the process-wide cold paths of a first decision once, before `/readyz` says ready, so
 * the first Check after ready is not the one that pays for them (docs/sidecar.md, "Readiness").
 * Each of these is compiled or set up on first use and cost a fresh process hundreds of
 * milliseconds of CPU on the first decision — past Envoy's 200 ms deadline on a busy node,
 * hence a 503 right after ready:
 * - the JSON Schemas of the policy document (v1 and v2) and of the capability catalog, which
 *   every fetched policy and catalog is validated against (ajv compiles each schema, and its
 *   meta-schema, on first use: the largest single cost);
 * - the ext_authz protobuf codecs (protobufjs generates a decoder and encoder per message type
 *   on first use), and the Check request parser and response builders around them;
 * - the ML-DSA verification a signed policy goes through, and the JSON Schema compiler the
 *   operation input check uses;
 * - a bearer token's verification (the JWT verifier, the JWK import and an ES256 signature
 *   check), with a key made here: the callers' own keys are fetched by the `jwks` step.
 * What stays on the first request of each caller is what depends on the caller: its policy,
 * its signer's keys, the partner's catalog and credentials (fetched from the authority; a few
 * milliseconds each), and the input schema of the operation called.
 */
export async function warmDecisionPath(
  betweenParts: () => Promise<void> = () => new Promise((resolve) => setImmediate(resolve)),
): Promise<void> {
  // Between parts the event loop runs: each part holds the CPU for up to a few hundred
  // milliseconds, and what else the process does meanwhile (health probes, its timers) waits.
  const parts = [
    warmTokenVerification,
    warmSignatures,
    warmDocumentSchemas,
    warmInputSchemas,
    warmCheckCodec,
  ];
  for (const part of parts) {
    await part();
    await betweenParts();
  }
}

/**
 * The parts that need no key and no I/O but the .proto files: the sidecar's start-up snapshot
 * runs them when it is built (scripts/sidecar-snapshot-entry.ts), so a process started from it
 * holds their compiled schemas and codecs already.
 */
export function warmCompiledParts(): void {
  warmDocumentSchemas();
  warmInputSchemas();
  warmCheckCodec();
  warmAddressPatterns();
}

/**
 * Node's IPv4 and IPv6 address patterns (large regular expressions, compiled on first use): every
 * `listen` on a host checks the address it resolved, and every connection its host. A start
 * from the snapshot paid their compile (3–8 ms of CPU) binding its first port (decision 3081).
 */
function warmAddressPatterns(): void {
  if (isIP("::1") !== 6 || isIP("127.0.0.1") !== 4) throw new Error("node:net's address check changed");
}

/**
 * Fetches the catalogs of the capabilities this sidecar is configured for (its capability map)
 * through the catalog cache a Check reads: the first Check of a mapped capability then does not
 * wait for its catalog (issue 30). Their input schemas are not compiled here: a catalog holds
 * many operations and the first Check needs one (decision 3071). A catalog that cannot be
 * fetched is left to the Check, which asks again and reports it.
 */
export async function warmCapabilityCatalogs(
  capabilityIds: readonly string[],
  fetchCatalog: (capabilityId: string) => Promise<unknown>,
): Promise<void> {
  await Promise.all(capabilityIds.map((id) => fetchCatalog(id).catch(() => undefined)));
}

async function warmTokenVerification(): Promise<void> {
  const issuer = "https://warm-up.invalid";
  const { privateKey, publicKey } = await generateKeyPair("ES256", { extractable: true });
  const jwk = { ...(await exportJWK(publicKey)), kid: "warm-up", alg: "ES256", use: "sig" };
  const verifier = createJwtVerifier({ issuer, audience: "warm-up", jwks: { keys: [jwk] } });
  const token = await new SignJWT({ scope: "warm-up" })
    .setProtectedHeader({ alg: "ES256", kid: "warm-up", typ: "at+jwt" })
    .setIssuer(issuer)
    .setAudience("warm-up")
    .setSubject("warm-up")
    .setIssuedAt()
    .setExpirationTime("1m")
    .sign(privateKey);
  const principal = await verifier.verify(token);
  if (principal.subject !== "warm-up") throw new Error("the warm-up token did not verify");
}

function warmSignatures(): void {
  const keys = generateSigKeyPair();
  const message = new TextEncoder().encode("authority sidecar warm-up");
  const context = "authority/warm-up";
  const signature = sign({ privateKey: keys.privateKey, message, context });
  if (!verify({ publicKey: keys.publicKey, message, signature, context })) {
    throw new Error("ML-DSA self-check failed");
  }
}

/** Compiles the schemas by validating documents they refuse: the compilation is what is wanted. */
function warmDocumentSchemas(): void {
  for (const schema_version of [POLICY_SCHEMA_V1, POLICY_SCHEMA_V2]) {
    try {
      validatePolicyDocument({ schema_version });
      throw new Error(`an empty ${schema_version} policy document was accepted`);
    } catch (error) {
      if (!(error instanceof PolicyDocumentError)) throw error;
    }
  }
  try {
    validateCapability({});
    throw new Error("an empty capability catalog was accepted");
  } catch (error) {
    if (!(error instanceof CapabilityError)) throw error;
  }
}

function warmInputSchemas(): void {
  // A schema like an imported operation's: path, query and a JSON body, each compiled once.
  const text = { type: "string", maxLength: 64 };
  validateInput(
    {
      path: { type: "object", properties: { id: text }, required: ["id"], additionalProperties: false },
      query: { type: "object", properties: { limit: { type: "integer", minimum: 1 } } },
      body: { type: "object", properties: { note: text, tags: { type: "array", items: text } } },
    },
    { path: { id: "42" }, query: { limit: "10" }, body: { note: "warm", tags: ["a"] } },
  );
}

/**
 * A Check request as Envoy sends one, through the codec both ways; an allow and a deny encoded.
 * With the peers Envoy always sends (source and destination addresses): protobufjs generates
 * each message type's decoder on its first use, and a first Check decoding them cost 2–12 ms
 * (decision 2811).
 */
function warmCheckCodec(): void {
  const check = loadProtos().authorization.Check;
  if (check === undefined) throw new Error("Authorization.Check missing");
  const peer = (address: string, principal: string) => ({
    address: { socket_address: { address, port_value: 8080 } },
    principal,
  });
  const request = {
    attributes: {
      source: peer("10.0.0.7", "spiffe://warm-up.invalid/source"),
      destination: peer("10.0.0.9", ""),
      request: {
        time: { seconds: "1", nanos: 0 },
        http: {
          id: "warm-up",
          method: "POST",
          path: "/warm-up?limit=1",
          host: "warm-up.invalid",
          scheme: "http",
          protocol: "HTTP/1.1",
          headers: { authorization: "Bearer warm-up", "content-type": "application/json" },
          body: "{}",
        },
      },
      context_extensions: { capability_id: "warm-up" },
    },
  };
  const parsed = parseCheckRequest(check.requestDeserialize(check.requestSerialize(request)));
  if (!parsed.complete || parsed.input.path !== "/warm-up?limit=1") {
    throw new Error("the warm-up Check request did not survive its codec");
  }
  check.responseSerialize(
    allowResponse({
      allow: true,
      headersToSet: { "x-api-key": "warm-up" },
      headersToRemove: ["authorization"],
      dynamicMetadata: { subject_id: "warm-up", policy_head: 1, cached: true },
      queryParametersToSet: { key: "warm-up" },
    }),
  );
  check.responseSerialize(
    denyResponse({
      allow: false,
      httpStatus: 401,
      reason: "missing_subject",
      requestId: "warm-up",
      headers: { "www-authenticate": 'Bearer realm="authority"' },
    }),
  );
}

/** V8's `gc`, taken off the global by `takeExposedGc()`; the warm-up's alone, for one collection. */
let fullCollection: (() => void) | undefined;

/**
 * A start from the snapshot runs with `--expose-gc` (bin/authority-sidecar): its main takes V8's
 * `gc` for collectStartUpGarbage() before any other code runs and leaves the global `undefined`
 * (V8 makes it non-configurable, so it cannot be deleted). The flag is turned off too: V8 puts
 * `gc` on the global of every context it creates while it is set (a `vm` context, a worker
 * thread's), which would hand it to any code again.
 */
export function takeExposedGc(): void {
  const global = globalThis as { gc?: unknown };
  if (typeof global.gc !== "function") return;
  fullCollection = global.gc as () => void;
  global.gc = undefined;
  setFlagsFromString("--no-expose-gc");
}

/**
 * One full collection of the start-up heap, once the warm-up's work is done and before `/readyz`
 * says ready (decision 3021). A process started from the snapshot begins with ≈ 20 MB of live
 * heap, and V8 sets its first old-generation limit only a few MB above what it deserialized: the
 * first mark-compact then came while the first Check after ready was being answered (≈ 20–40 ms
 * of its CPU). Collected here, the limit is set from the live heap and that Check runs without
 * one. Nothing without `gc` (a start from the sources grows its heap by allocation and has
 * collected on the way). Not through a `vm` context made for it: creating a context makes V8's
 * memory reducer run two more mark-compacts eight seconds later.
 */
export function collectStartUpGarbage(): void {
  const collect = fullCollection;
  fullCollection = undefined; // once: not a full-heap pause on demand for whatever runs later
  collect?.();
}
