import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { type ClientReadableStream, status as GrpcStatus, type ServiceError } from "@grpc/grpc-js";
import { AUTHORIZATION_SERVICE } from "../../../../src/servers/sidecar/grpc/proto.ts";
import {
  type Decoded,
  type Harness,
  healthCheckMethod,
  healthWatchMethod,
  startHarness,
  unary,
} from "./helpers.ts";

function nextMessage(stream: ClientReadableStream<Decoded>): Promise<Decoded> {
  return new Promise((resolve, reject) => {
    const onData = (message: Decoded): void => {
      stream.off("error", onError);
      resolve(message);
    };
    const onError = (error: Error): void => {
      stream.off("data", onData);
      reject(error);
    };
    stream.once("data", onData);
    stream.once("error", onError);
  });
}

describe("grpc.health.v1.Health", () => {
  let harness: Harness;

  before(async () => {
    harness = await startHarness({
      check: async () => ({ allow: true, headersToSet: {}, headersToRemove: [], dynamicMetadata: {} }),
    });
  });
  after(() => harness.close());

  test("Check reports SERVING for the server and for the Authorization service", async () => {
    assert.deepEqual(await unary(harness.client, healthCheckMethod, { service: "" }), { status: "SERVING" });
    assert.deepEqual(await unary(harness.client, healthCheckMethod, { service: AUTHORIZATION_SERVICE }), {
      status: "SERVING",
    });
  });

  test("Check on an unknown service is NOT_FOUND", async () => {
    await assert.rejects(
      unary(harness.client, healthCheckMethod, { service: "no.such.Service" }),
      (error: ServiceError) => error.code === GrpcStatus.NOT_FOUND,
    );
  });

  test("setServingStatus is reflected by Check and pushed to Watch", async () => {
    const stream = harness.client.makeServerStreamRequest(
      healthWatchMethod.path,
      healthWatchMethod.requestSerialize,
      healthWatchMethod.responseDeserialize,
      { service: AUTHORIZATION_SERVICE },
    ) as ClientReadableStream<Decoded>;
    stream.on("error", () => {});
    try {
      assert.deepEqual(await nextMessage(stream), { status: "SERVING" });
      const change = nextMessage(stream);
      harness.server.setServingStatus("NOT_SERVING", AUTHORIZATION_SERVICE);
      assert.deepEqual(await change, { status: "NOT_SERVING" });
      assert.deepEqual(await unary(harness.client, healthCheckMethod, { service: AUTHORIZATION_SERVICE }), {
        status: "NOT_SERVING",
      });
      assert.deepEqual(await unary(harness.client, healthCheckMethod, { service: "" }), {
        status: "SERVING",
      });
      const back = nextMessage(stream);
      harness.server.setServingStatus("SERVING");
      assert.deepEqual(await back, { status: "SERVING" });
    } finally {
      stream.cancel();
    }
  });

  test("Watch on an unknown service reports SERVICE_UNKNOWN and stays open", async () => {
    const stream = harness.client.makeServerStreamRequest(
      healthWatchMethod.path,
      healthWatchMethod.requestSerialize,
      healthWatchMethod.responseDeserialize,
      { service: "later.Service" },
    ) as ClientReadableStream<Decoded>;
    stream.on("error", () => {});
    try {
      assert.deepEqual(await nextMessage(stream), { status: "SERVICE_UNKNOWN" });
      const known = nextMessage(stream);
      harness.server.setServingStatus("SERVING", "later.Service");
      assert.deepEqual(await known, { status: "SERVING" });
    } finally {
      stream.cancel();
    }
  });
});

test("close turns health NOT_SERVING and ends open Watch streams", async () => {
  const harness = await startHarness({
    check: async () => ({ allow: true, headersToSet: {}, headersToRemove: [], dynamicMetadata: {} }),
    initialServingStatus: "NOT_SERVING",
  });
  const stream = harness.client.makeServerStreamRequest(
    healthWatchMethod.path,
    healthWatchMethod.requestSerialize,
    healthWatchMethod.responseDeserialize,
    { service: "" },
  ) as ClientReadableStream<Decoded>;
  const ended = new Promise<void>((resolve) => {
    stream.on("end", resolve);
    stream.on("error", () => resolve());
  });
  assert.deepEqual(await nextMessage(stream), { status: "NOT_SERVING" });
  harness.server.setServingStatus("SERVING");
  assert.deepEqual(await nextMessage(stream), { status: "SERVING" });
  const closed = harness.server.close({ graceMs: 5_000 });
  await ended;
  await closed;
  harness.client.close();
});
