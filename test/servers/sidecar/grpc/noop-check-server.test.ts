import assert from "node:assert/strict";
import { test } from "node:test";
import { Client, credentials } from "@grpc/grpc-js";
import { startNoopCheckServer } from "../../../../bench/noop-check-server.ts";
import { checkMethod, envoyCheckRequest, unary } from "./helpers.ts";

test("the bench's baseline server allows every Check", async () => {
  const noop = await startNoopCheckServer();
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
