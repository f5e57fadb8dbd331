/**
 * Decision 2701's measurement: the forward proxy's upstream leg (node:http through the egress
 * gate's agent, the body buffered, then the shared scrub → redact stage) against the
 * executor's send stage (undici fetch through the same gate, inject, deadline, scrub, redact,
 * request and response hashes) on one loopback upstream. Two answers: CPU per call for a
 * 64 KiB JSON body, and whether a 4 KiB binary body reaches the caller byte for byte.
 * `node bench/proxy-send.ts` prints one JSON line; nothing is written.
 */
import { randomBytes } from "node:crypto";
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import type { OperationSnapshot } from "../src/core/operation-snapshot.ts";
import type { AuthProfile, TokenSet } from "../src/execute/auth-profiles.ts";
import { scrubAndRedact } from "../src/execute/scrub-redact.ts";
import { createSecretScrubber } from "../src/execute/secret-scrub.ts";
import { egressAllowing } from "../test/helpers/egress.ts";
import { executeOnce, testExecutor } from "../test/helpers/execute-once.ts";

const KEY = "bench-api-key-value-0123456789";
const JSON_BODY = Buffer.from(
  JSON.stringify({
    items: Array.from({ length: 600 }, (_, i) => ({ id: `item-${i}`, name: "x".repeat(80) })),
  }),
);
const BINARY_BODY = randomBytes(4096);

const server = createServer((req, res) => {
  req.resume();
  const binary = req.url?.startsWith("/v1/binary") === true;
  res.writeHead(200, { "content-type": binary ? "application/octet-stream" : "application/json" });
  res.end(binary ? BINARY_BODY : JSON_BODY);
});
await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
const egress = egressAllowing([origin]);

const snapshot = (path: string): OperationSnapshot => ({
  operation_id: "get",
  method: "GET",
  path,
  input_schema: {
    path: { type: "object", properties: {}, additionalProperties: false },
    query: { type: "object", properties: {}, additionalProperties: false },
    headers: { type: "object", additionalProperties: { type: "string" } },
    body: null,
  },
  response_schema: null,
  upstream_url_template: `${origin}${path}`,
  auth_profile_ref: "bench",
  response_rules: [],
  parameter_constraints: [],
});
const profile: AuthProfile = {
  type: "static",
  id: "bench",
  kind: "api_key",
  in: "header",
  name: "x-api-key",
  secretRef: "k",
};
const tokenSets = new Map<string, TokenSet>();
const executor = testExecutor({
  secretResolver: async () => KEY,
  tokenSetStore: {
    get: async (key) => tokenSets.get(key),
    put: async (key, value) => void tokenSets.set(key, value),
    delete: async (key) => void tokenSets.delete(key),
  },
  constraintsRollout: { enabled: false, isPartnerAllowlisted: () => false },
  egress,
});
const viaSend = (path: string) =>
  executeOnce(executor, { snapshot: snapshot(path), args: {}, authProfile: profile, partnerId: "bench" });

const client = egress.httpClient({ keepAlive: true });
const scrubber = createSecretScrubber([KEY]);
/** The proxy's leg: request with the credential, buffer, scrub → redact, the bytes it would send. */
const viaProxyLeg = (path: string): Promise<Buffer> =>
  new Promise((resolve, reject) => {
    const req = client.request({
      protocol: "http:",
      hostname: "127.0.0.1",
      port: Number(new URL(origin).port),
      path,
      method: "GET",
      headers: { "x-api-key": KEY, "accept-encoding": "identity" },
    });
    req.on("response", (res: IncomingMessage) => {
      const chunks: Buffer[] = [];
      res.on("data", (chunk: Buffer) => chunks.push(chunk));
      res.on("end", () => {
        const read = scrubAndRedact(Buffer.concat(chunks), res.headers["content-type"], [], scrubber);
        if (read.kind === "json") resolve(Buffer.from(JSON.stringify(read.value)));
        else if (read.kind === "other") resolve(Buffer.from(read.bytes));
        else resolve(Buffer.alloc(0));
      });
    });
    req.on("error", reject);
    req.end();
  });

async function cpuPerCall(run: () => Promise<unknown>, calls: number): Promise<number> {
  for (let i = 0; i < 200; i++) await run();
  const cpu = process.cpuUsage();
  for (let i = 0; i < calls; i++) await run();
  const used = process.cpuUsage(cpu);
  return Math.round((used.user + used.system) / calls);
}

const sendBinary = await viaSend("/v1/binary");
const sentBytes = Buffer.from(String(sendBinary.body), "utf8");
const proxyBytes = await viaProxyLeg("/v1/binary");
const rounds = { send: [] as number[], proxy: [] as number[] };
for (let round = 0; round < 5; round++) {
  rounds.send.push(await cpuPerCall(() => viaSend("/v1/json"), 400));
  rounds.proxy.push(await cpuPerCall(() => viaProxyLeg("/v1/json"), 400));
}
const median = (values: number[]) => values.sort((a, b) => a - b)[Math.floor(values.length / 2)];
console.log(
  JSON.stringify({
    json64KiB: { sendCpuUsPerCall: median(rounds.send), proxyLegCpuUsPerCall: median(rounds.proxy) },
    binary4KiB: {
      sendBodyType: typeof sendBinary.body,
      sendBytesIdentical: sentBytes.equals(BINARY_BODY),
      sendBytesLength: sentBytes.length,
      proxyBytesIdentical: proxyBytes.equals(BINARY_BODY),
    },
  }),
);
client.destroy();
server.close();
await egress.close();
