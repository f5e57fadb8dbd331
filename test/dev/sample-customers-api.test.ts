import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import { startSampleCustomersApi } from "../../src/dev/sample-customers-api.ts";

const apiKey = "sample-api-key-0123456789";
const adminBearer = "sample-admin-bearer-0123456789";

describe("sample customers API", () => {
  test("serves the customers API behind its API key, with data worth redacting", async () => {
    const api = await startSampleCustomersApi({ apiKey, adminBearer });
    after(() => api.close());
    const headers = { "x-api-key": apiKey };
    assert.equal((await fetch(`${api.url}/customers`)).status, 401);
    assert.equal(
      (await fetch(`${api.url}/customers`, { headers: { "x-api-key": "wrong-key-000" } })).status,
      401,
    );

    const list = await fetch(`${api.url}/customers?limit=2`, { headers });
    assert.equal(list.status, 200);
    const page = (await list.json()) as { items: Array<Record<string, unknown>> };
    assert.equal(page.items.length, 2);
    assert.match(String(page.items[0]?.email), /@example\.com$/);

    const methods = await fetch(`${api.url}/customers/cus_00000001/payment-methods`, { headers });
    const card = ((await methods.json()) as { items: Array<Record<string, unknown>> }).items[0];
    assert.equal(card?.card_number, "4242424242424242");
    assert.equal(card?.cvc, "123");

    const created = await fetch(`${api.url}/customers`, {
      method: "POST",
      headers: { ...headers, "content-type": "application/json" },
      body: JSON.stringify({ name: "Edsger Dijkstra", email: "edsger@example.com" }),
    });
    assert.equal(created.status, 201);
    const id = ((await created.json()) as { id: string }).id;
    assert.match(id, /^cus_[0-9]{8}$/);
    assert.equal((await fetch(`${api.url}/customers/${id}`, { headers })).status, 200);
    assert.equal((await fetch(`${api.url}/customers/${id}`, { method: "DELETE", headers })).status, 204);
    assert.equal((await fetch(`${api.url}/customers/${id}`, { headers })).status, 404);
    assert.equal((await fetch(`${api.url}/customers/not-an-id`, { headers })).status, 404);

    // The admin export needs the admin bearer, not the API key.
    const exportCall = (auth: Record<string, string>) =>
      fetch(`${api.url}/admin/customers/export`, {
        method: "POST",
        headers: { ...auth, "content-type": "application/json" },
        body: JSON.stringify({ format: "jsonl" }),
      });
    assert.equal((await exportCall(headers)).status, 401);
    assert.equal((await exportCall({ authorization: `Bearer ${adminBearer}` })).status, 202);
    assert.ok(api.received.length >= 10);
    assert.equal(api.received[0]?.apiKeyOk, false);
  });

  test("refuses an authority envelope it has no way to verify", async () => {
    const api = await startSampleCustomersApi({ apiKey, adminBearer, envelopeVerification: () => undefined });
    after(() => api.close());
    const answer = await fetch(`${api.url}/customers`, {
      headers: { "x-api-key": apiKey, "x-authority-envelope": "e30" },
    });
    assert.equal(answer.status, 503);
    assert.equal(api.received.at(-1)?.hadEnvelope, true);
  });

  test("rejects options it cannot use", async () => {
    await assert.rejects(startSampleCustomersApi({ apiKey: "short", adminBearer }), /apiKey/);
    await assert.rejects(startSampleCustomersApi({ apiKey, adminBearer, port: 70000 }), /port/);
  });
});
