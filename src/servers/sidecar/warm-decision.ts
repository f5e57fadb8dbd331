import { generateSigKeyPair, sign, verify } from "../../crypto/index.ts";
import { validateInput } from "../../execute/input.ts";

/**
 * Runs process-wide cold paths of a first decision once before `/readyz` says ready: the
 * ML-DSA verification a signed policy goes through, and the JSON Schema compiler the input
 * check uses (its first compilation costs far more than later ones). It shortens a fresh
 * process's first decision but does not make it warm: the per-caller fetches (policy, its
 * signer's keys, catalog, credentials) and the first run of the code around them stay on the
 * first request (docs/sidecar.md, "Health and shutdown").
 */
export async function warmDecisionPath(): Promise<void> {
  const keys = generateSigKeyPair();
  const message = new TextEncoder().encode("authority sidecar warm-up");
  const context = "authority/warm-up";
  const signature = sign({ privateKey: keys.privateKey, message, context });
  if (!verify({ publicKey: keys.publicKey, message, signature, context })) {
    throw new Error("ML-DSA self-check failed");
  }
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
