/**
 * Runs the sample upstream on its own (the demo's "Customer records" API on
 * 127.0.0.1:18080, the server examples/openapi/customers.yaml names):
 *
 *   AUTHORITY_URL=http://127.0.0.1:8080 AUTHORITY_BINDING_ID=<binding> \
 *   AUTHORITY_CLIENT_ID=<workload client with authority/authority.broker.execute> \
 *   AUTHORITY_CLIENT_SECRET=<its secret> UPSTREAM_API_KEY=<the auth profile's key> \
 *   node examples/upstream/main.ts
 */
import { startSampleUpstream } from "./server.ts";

function required(name: string): string {
  const value = process.env[name];
  if (value === undefined || value === "") {
    console.error(`${name} is required`);
    process.exit(2);
  }
  return value;
}

const upstream = await startSampleUpstream({
  authorityUrl: process.env.AUTHORITY_URL ?? "http://127.0.0.1:8080",
  bindingId: required("AUTHORITY_BINDING_ID"),
  credentials: { clientId: required("AUTHORITY_CLIENT_ID"), clientSecret: required("AUTHORITY_CLIENT_SECRET") },
  ...(process.env.UPSTREAM_API_KEY === undefined ? {} : { apiKey: process.env.UPSTREAM_API_KEY }),
  port: Number(process.env.PORT ?? "18080"),
});
console.log(`sample upstream listening on ${upstream.url}`);
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.once(signal, () => {
    void upstream.close().then(() => process.exit(0));
  });
}
