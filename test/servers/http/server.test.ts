import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { FastifyInstance } from "fastify";
import { pino } from "pino";
import { CryptoServiceError } from "../../../src/clients/crypto-service/reasons.ts";
import { AuthorityError } from "../../../src/errors.ts";
import { EgressDeniedError } from "../../../src/execute/egress.ts";
import { createHttpServer, requestIdFrom } from "../../../src/servers/http/server.ts";

describe("http server base", () => {
  let app: FastifyInstance;
  let base: string;
  before(async () => {
    app = createHttpServer({ bodyLimit: 1024, logger: pino({ level: "silent" }) });
    app.post(
      "/echo",
      { schema: { body: { type: "object", required: ["n"], properties: { n: { type: "integer" } } } } },
      async (request) => request.body,
    );
    app.get("/boom", async () => {
      throw new Error("connection to postgres://user:hunter2@db failed");
    });
    app.get("/items/:id", async () => ({ ok: true }));
    app.get("/gone", async () => {
      throw new AuthorityError("not_found", "No such partner.");
    });
    // Module errors that name their table entry (TableMapped), thrown by a route as they are.
    app.get("/egress", async () => {
      throw new EgressDeniedError("private");
    });
    app.get("/owner", async () => {
      throw new CryptoServiceError("owner_not_found", { fields: ["owner"] });
    });
    await app.listen({ host: "127.0.0.1", port: 0 });
    const address = app.server.address();
    assert.ok(address && typeof address === "object");
    base = `http://127.0.0.1:${address.port}`;
  });
  after(() => app.close());

  const post = (body: string, type = "application/json") =>
    fetch(`${base}/echo`, { method: "POST", headers: { "content-type": type }, body });

  it("answers schema violations with 400 and the failing location", async () => {
    const response = await post(JSON.stringify({ n: "x" }));
    assert.equal(response.status, 400);
    const body = (await response.json()) as Record<string, unknown>;
    assert.equal(body.error, "invalid_request");
    assert.match(String(body.requestId), /^req_/);
    assert.equal(response.headers.get("x-request-id"), body.requestId);
  });

  it("answers malformed JSON, wrong media types and big bodies with clear codes", async () => {
    assert.equal((await post("{bad")).status, 400);
    assert.equal((await post("<n/>", "application/xml")).status, 415);
    const big = await post(JSON.stringify({ n: 1, pad: "x".repeat(4096) }));
    assert.equal(big.status, 413);
    assert.equal(((await big.json()) as { error: string }).error, "payload_too_large");
  });

  it("never leaks internals in a 500", async () => {
    const response = await fetch(`${base}/boom`);
    assert.equal(response.status, 500);
    const text = await response.text();
    assert.ok(!text.includes("hunter2"));
    assert.ok(!text.includes("postgres"));
    assert.ok(!text.includes("at "));
    assert.equal((JSON.parse(text) as { error: string }).error, "internal");
  });

  it("maps AuthorityError and unknown routes", async () => {
    const gone = await fetch(`${base}/gone`);
    assert.equal(gone.status, 404);
    assert.equal(((await gone.json()) as { message: string }).message, "No such partner.");
    assert.equal((await fetch(`${base}/nope`)).status, 404);
  });

  it("answers a module error by the table entry it names, through the one converter (never 500)", async () => {
    const egress = await fetch(`${base}/egress`);
    assert.equal(egress.status, 403);
    assert.equal(((await egress.json()) as { error: string }).error, "egress_denied");
    const owner = await fetch(`${base}/owner`);
    assert.equal(owner.status, 404);
    const body = (await owner.json()) as { error: string; details: unknown };
    assert.equal(body.error, "not_found");
    assert.deepEqual(body.details, { reason: "owner_not_found", fields: ["owner"] });
  });

  it("answers malformed URLs and over-long path segments in the project's format", async () => {
    const bad = await fetch(`${base}/gone%zz`);
    assert.equal(bad.status, 400);
    const badBody = await bad.text();
    assert.equal((JSON.parse(badBody) as { error: string }).error, "invalid_request");
    assert.ok(!badBody.includes("%zz"));
    const long = await fetch(`${base}/items/${"x".repeat(500)}`);
    assert.equal(long.status, 414);
    assert.equal(((await long.json()) as { error: string }).error, "uri_too_long");
  });

  it("keeps plain caller request ids and replaces odd ones", () => {
    assert.equal(requestIdFrom("abc-1234-XYZ"), "abc-1234-XYZ");
    assert.match(requestIdFrom("bad id\nwith newline"), /^req_/);
    assert.match(requestIdFrom(undefined), /^req_/);
  });
});
