import pg from "pg";
import { openStore } from "../src/store/index.ts";
import { startPostgresServer } from "../test/helpers/postgres-server.ts";
import { startInvokeWorld } from "../bench/invoke.ts";

const counts = new Map<string, number>();
let counting = false;
const orig = pg.Client.prototype.query;
(pg.Client.prototype as any).query = function (this: unknown, ...args: any[]) {
  if (counting) {
    const text = typeof args[0] === "string" ? args[0] : args[0]?.text;
    const key = String(text).replace(/\s+/g, " ").slice(0, 140);
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  return (orig as any).apply(this, args);
};
const server = await startPostgresServer();
const store = await openStore(server.url);
const world = await startInvokeWorld(store);
const authorize = async () => {
  const r = await fetch(`${world.authority}/v1/authorize-invocation`, {
    method: "POST",
    headers: { authorization: `Bearer ${world.agentToken}`, "content-type": "application/json" },
    body: JSON.stringify({ capability_id: "items", method: "GET", path: "/items/item-1" }),
  });
  await r.text();
  return r.status;
};
for (let i = 0; i < 50; i++) await authorize();
await new Promise((r) => setTimeout(r, 500));
counting = true;
const N = 200;
for (let i = 0; i < N; i++) await authorize();
await new Promise((r) => setTimeout(r, 1000));
counting = false;
for (const [k, v] of [...counts].sort((a, b) => b[1] - a[1])) console.log((v / N).toFixed(2), k);
await world.close();
await store.close();
await server.stop();
process.exit(0);
