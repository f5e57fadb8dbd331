import assert from "node:assert/strict";
import { test } from "node:test";
import { Client, credentials } from "@grpc/grpc-js";
import { startNoopCheckServer, startTransportNoopServer } from "../../../../bench/noop-check-server.ts";
import { checkMethod, envoyCheckRequest, unary } from "./helpers.ts";

for (const [name, start] of [
  ["bench", startNoopCheckServer],
  ["transport", startTransportNoopServer],
] as const) {
  test(`the ${name} baseline server allows every Check`, async () => {
    const noop = await start();
    const client = new Client(`127.0.0.1:${noop.port}`, credentials.createInsecure());
    try {
      const response = await unary(client, checkMethod, envoyCheckRequest({}));
      assert.equal(response.status.code, 0);
      assert.equal(response.http_response, "ok_response");
    } finally {
      client.close();
      await noop.close();
    }
  });
}
