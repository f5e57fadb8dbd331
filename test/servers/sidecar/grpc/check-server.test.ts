import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { status as GrpcStatus, logVerbosity, type ServiceError, setLogVerbosity } from "@grpc/grpc-js";
import { AuthorityError } from "../../../../src/errors.ts";
import { createCheckServer } from "../../../../src/servers/sidecar/grpc/check-server.ts";
import { CheckServerError } from "../../../../src/servers/sidecar/grpc/errors.ts";
import type { CheckDecision, CheckInput, DecisionEvent } from "../../../../src/servers/sidecar/grpc/types.ts";
import {
  checkMethod,
  DECISION_TIMEOUT_MS,
  type Decoded,
  envoyCheckRequest,
  type Harness,
  silentLogger,
  startHarness,
  testCheckServer,
  unary,
  unaryRaw,
} from "./helpers.ts";

const allowDecision: CheckDecision = {
  allow: true,
  headersToSet: { "X-Authority-Subject": "agent-1", "x-authority-permission": "cap-orders:get:/v1/items" },
  headersToRemove: ["Authorization", "x-authority-user-assertion"],
  dynamicMetadata: { subject: "agent-1", policyVersion: 3, cached: true },
};

async function waitUntil(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setTimeout(resolve, 5));
}

/** A Check its caller can cancel. */
function cancellableCheck(harness: Harness, path: string): { answer: Promise<Decoded>; cancel: () => void } {
  let cancel = (): void => undefined;
  const answer = new Promise<Decoded>((resolve, reject) => {
    const call = harness.client.makeUnaryRequest(
      checkMethod.path,
      checkMethod.requestSerialize,
      checkMethod.responseDeserialize,
      envoyCheckRequest({ path }),
      { deadline: Date.now() + 10_000 },
      (error: ServiceError | null, response?: object) => {
        if (error !== null || response === undefined) reject(error ?? new Error("no response"));
        else resolve(response as Decoded);
      },
    );
    cancel = () => call.cancel();
  });
  return { answer, cancel };
}

/** Resolves once `signal` aborts, with an allow: a late allow must never get through. */
function allowWhenAborted(signal: AbortSignal): Promise<CheckDecision> {
  return new Promise((resolve) => {
    signal.addEventListener("abort", () => resolve(allowDecision), { once: true });
  });
}

function headerPairs(options: Decoded[]): Array<[string, string, string]> {
  return options.map((option) => [option.header.key, option.header.value, option.append_action]);
}

function deniedBody(response: Decoded): Decoded {
  return JSON.parse(response.denied_response.body) as Decoded;
}

describe("ext_authz Check: decisions", () => {
  let harness: Harness;
  let behaviour: (input: CheckInput, signal: AbortSignal) => Promise<CheckDecision>;
  const inputs: CheckInput[] = [];
  const events: DecisionEvent[] = [];

  before(async () => {
    harness = await startHarness({
      check: (input, signal) => {
        inputs.push(input);
        return behaviour(input, signal);
      },
      deadlineMs: 100,
      onDecision: (event) => events.push(event),
    });
  });
  after(() => harness.close());

  test("an allow becomes status OK with ok_response headers, headers_to_remove and dynamic_metadata", async () => {
    behaviour = async () => allowDecision;
    const response = await unary(harness.client, checkMethod, envoyCheckRequest({}));

    assert.equal(response.status.code, 0);
    assert.equal(response.http_response, "ok_response");
    assert.equal(response.denied_response, undefined);
    assert.deepEqual(headerPairs(response.ok_response.headers), [
      ["x-authority-subject", "agent-1", "OVERWRITE_IF_EXISTS_OR_ADD"],
      ["x-authority-permission", "cap-orders:get:/v1/items", "OVERWRITE_IF_EXISTS_OR_ADD"],
    ]);
    for (const option of response.ok_response.headers) assert.equal(option.append, null);
    assert.deepEqual(response.ok_response.headers_to_remove, ["authorization", "x-authority-user-assertion"]);
    assert.deepEqual(response.dynamic_metadata.fields, {
      subject: { stringValue: "agent-1", kind: "stringValue" },
      policyVersion: { numberValue: 3, kind: "numberValue" },
      cached: { boolValue: true, kind: "boolValue" },
    });
  });

  test("the decision function receives the request as Envoy described it", async () => {
    behaviour = async () => allowDecision;
    inputs.length = 0;
    await unary(
      harness.client,
      checkMethod,
      envoyCheckRequest({
        method: "POST",
        path: "/v1/orders/42?expand=lines",
        host: "orders.internal",
        id: "rid-0007",
        headers: { authorization: "Bearer abc" },
        contextExtensions: { capability_id: "cap-orders", route: "orders" },
      }),
    );
    const input = inputs[0];
    assert.ok(input);
    assert.equal(input.method, "POST");
    assert.equal(input.path, "/v1/orders/42?expand=lines");
    assert.equal(input.host, "orders.internal");
    assert.equal(input.scheme, "https");
    assert.equal(input.requestId, "rid-0007");
    assert.equal(input.sourcePrincipal, "spiffe://cluster.local/ns/agents/sa/agent-1");
    assert.equal(input.headers.authorization, "Bearer abc");
    assert.equal(input.headers[":path"], "/v1/orders/42?expand=lines");
    assert.deepEqual(input.contextExtensions, { capability_id: "cap-orders", route: "orders" });
  });

  test("a 401 deny pairs UNAUTHENTICATED with HTTP 401, a JSON body and extra headers", async () => {
    behaviour = async () => ({
      allow: false,
      httpStatus: 401,
      reason: "invalid_token",
      requestId: "rid-401",
      headers: {
        "WWW-Authenticate": 'Bearer realm="authority"',
        "content-type": "text/plain",
        "X-Authority-Request-Id": "not-the-decision",
      },
    });
    const response = await unary(harness.client, checkMethod, envoyCheckRequest({}));

    assert.equal(response.status.code, GrpcStatus.UNAUTHENTICATED);
    assert.equal(response.status.message, "invalid_token");
    assert.equal(response.http_response, "denied_response");
    assert.equal(response.ok_response, undefined);
    assert.equal(response.denied_response.status.code, "Unauthorized");
    assert.deepEqual(headerPairs(response.denied_response.headers), [
      ["content-type", "application/json", "OVERWRITE_IF_EXISTS_OR_ADD"],
      ["x-authority-request-id", "rid-401", "OVERWRITE_IF_EXISTS_OR_ADD"],
      ["www-authenticate", 'Bearer realm="authority"', "OVERWRITE_IF_EXISTS_OR_ADD"],
    ]);
    assert.deepEqual(deniedBody(response), {
      status: "denied",
      reason: "invalid_token",
      requestId: "rid-401",
      rule: "auth/token",
    });
    // Envoy's access log reads the deny's facts as it reads an allow's.
    assert.deepEqual(response.dynamic_metadata, {
      fields: {
        request_id: { stringValue: "rid-401", kind: "stringValue" },
        reason: { stringValue: "invalid_token", kind: "stringValue" },
      },
    });
  });

  test("a 403 deny pairs PERMISSION_DENIED with HTTP 403; an empty requestId takes the request's id", async () => {
    behaviour = async () => ({ allow: false, httpStatus: 403, reason: "policy_revoked", requestId: "" });
    const response = await unary(harness.client, checkMethod, envoyCheckRequest({ id: "envoy-rid-9" }));

    assert.equal(response.status.code, GrpcStatus.PERMISSION_DENIED);
    assert.equal(response.denied_response.status.code, "Forbidden");
    assert.deepEqual(deniedBody(response), {
      status: "denied",
      reason: "policy_revoked",
      requestId: "envoy-rid-9",
      rule: "policy/revoked",
      remedy: { action: "contact_partner" },
    });
  });

  test("400, 429 and 503 denies carry INVALID_ARGUMENT, RESOURCE_EXHAUSTED and UNAVAILABLE", async () => {
    const cases = [
      [400, "missing_capability", GrpcStatus.INVALID_ARGUMENT, "BadRequest"],
      [429, "rate_limited", GrpcStatus.RESOURCE_EXHAUSTED, "TooManyRequests"],
      [503, "upstream_unavailable", GrpcStatus.UNAVAILABLE, "ServiceUnavailable"],
    ] as const;
    for (const [httpStatus, reason, rpcCode, name] of cases) {
      behaviour = async () => ({ allow: false, httpStatus, reason, requestId: "r" });
      const response = await unary(harness.client, checkMethod, envoyCheckRequest({}));
      assert.equal(response.status.code, rpcCode, reason);
      assert.equal(response.denied_response.status.code, name, reason);
    }
  });

  test("a rejecting decision function is a 500 internal deny, as on every other path", async () => {
    behaviour = async () => {
      throw new Error("database exploded with secret=hunter2");
    };
    const response = await unary(harness.client, checkMethod, envoyCheckRequest({ id: "rid-error" }));
    assert.equal(response.status.code, GrpcStatus.INTERNAL);
    assert.equal(response.denied_response.status.code, "InternalServerError");
    assert.deepEqual(deniedBody(response), {
      status: "denied",
      reason: "internal",
      requestId: "rid-error",
      rule: "service/internal",
    });
    assert.doesNotMatch(response.denied_response.body, /hunter2/);
  });

  test("a synchronously throwing decision function is a deny too", async () => {
    behaviour = () => {
      throw new TypeError("boom");
    };
    const response = await unary(harness.client, checkMethod, envoyCheckRequest({}));
    assert.equal(response.http_response, "denied_response");
    assert.equal(deniedBody(response).reason, "internal");
  });

  test("a thrown AuthorityError keeps its code, HTTP status and gRPC code", async () => {
    behaviour = async () => {
      throw new AuthorityError("policy_expired");
    };
    let response = await unary(harness.client, checkMethod, envoyCheckRequest({}));
    assert.equal(response.status.code, GrpcStatus.PERMISSION_DENIED);
    assert.equal(deniedBody(response).reason, "policy_expired");

    behaviour = async () => {
      throw new AuthorityError("invalid_token");
    };
    response = await unary(harness.client, checkMethod, envoyCheckRequest({}));
    assert.equal(response.status.code, GrpcStatus.UNAUTHENTICATED);
    assert.equal(response.denied_response.status.code, "Unauthorized");
  });

  test("a decision function past the deadline is a 503 deny, and its late allow is ignored", async () => {
    let aborted: AbortSignal | undefined;
    behaviour = (_input, signal) => {
      aborted = signal;
      return allowWhenAborted(signal);
    };
    const response = await unary(harness.client, checkMethod, envoyCheckRequest({ id: "rid-slow" }));
    assert.equal(response.status.code, GrpcStatus.UNAVAILABLE);
    assert.equal(response.denied_response.status.code, "ServiceUnavailable");
    assert.deepEqual(deniedBody(response), {
      status: "denied",
      reason: "upstream_unavailable",
      requestId: "rid-slow",
      rule: "service/unavailable",
      remedy: { action: "retry_later" },
    });
    assert.equal(aborted?.aborted, true);
  });

  test("malformed decisions never allow", async () => {
    const malformed: unknown[] = [
      { allow: "true", headersToSet: {}, headersToRemove: [], dynamicMetadata: {} },
      { allow: true },
      { allow: true, headersToSet: { "bad header": "x" }, headersToRemove: [], dynamicMetadata: {} },
      { allow: true, headersToSet: { "x-a": "line\r\nbreak" }, headersToRemove: [], dynamicMetadata: {} },
      { allow: true, headersToSet: {}, headersToRemove: [], dynamicMetadata: { n: Number.NaN } },
      { allow: false, httpStatus: 200, reason: "x", requestId: "r" },
      { allow: false, httpStatus: 403, reason: "", requestId: "r" },
      null,
      "allow",
    ];
    for (const value of malformed) {
      behaviour = async () => value as CheckDecision;
      const response = await unary(harness.client, checkMethod, envoyCheckRequest({}));
      assert.equal(response.http_response, "denied_response", JSON.stringify(value));
      assert.notEqual(response.status.code, 0);
      assert.equal(deniedBody(response).reason, "internal");
    }
  });

  test("an empty CheckRequest is denied 400 without asking the decision function", async () => {
    behaviour = async () => allowDecision;
    inputs.length = 0;
    const response = await unary(harness.client, checkMethod, {});
    assert.equal(response.status.code, GrpcStatus.INVALID_ARGUMENT);
    assert.equal(response.denied_response.status.code, "BadRequest");
    assert.equal(deniedBody(response).reason, "invalid_request");
    assert.equal(inputs.length, 0);
  });

  test("a CheckRequest without an HTTP request (network filter shape) is denied 400", async () => {
    behaviour = async () => allowDecision;
    const response = await unary(harness.client, checkMethod, {
      attributes: { source: { principal: "spiffe://x" }, context_extensions: { a: "b" } },
    });
    assert.equal(deniedBody(response).reason, "invalid_request");
  });

  test("undecodable request bytes get a deny, not a gRPC error", async () => {
    behaviour = async () => allowDecision;
    const bytes = await unaryRaw(harness.client, checkMethod.path, Uint8Array.from([0x0a, 0xff, 0xff, 0xff]));
    const response = checkMethod.responseDeserialize(bytes) as Decoded;
    assert.equal(response.status.code, GrpcStatus.INVALID_ARGUMENT);
    assert.equal(deniedBody(response).reason, "invalid_request");
    assert.match(deniedBody(response).requestId, /^[0-9a-f-]{36}$/);
  });

  test("onDecision sees every outcome", async () => {
    events.length = 0;
    behaviour = async () => allowDecision;
    await unary(harness.client, checkMethod, envoyCheckRequest({ id: "event-01" }));
    behaviour = async () => ({
      allow: false,
      httpStatus: 403,
      reason: "operation_not_allowed",
      requestId: "event-02",
    });
    await unary(harness.client, checkMethod, envoyCheckRequest({ id: "event-02" }));
    await unary(harness.client, checkMethod, {});

    assert.equal(events.length, 3);
    const [allowed, denied, invalid] = events;
    assert.deepEqual(
      { ...allowed, durationMs: 0 },
      {
        outcome: "allow",
        allowed: true,
        httpStatus: 200,
        rpcCode: 0,
        reason: null,
        requestId: "event-01",
        durationMs: 0,
      },
    );
    assert.equal(denied?.outcome, "deny");
    assert.equal(denied?.httpStatus, 403);
    assert.equal(denied?.rpcCode, GrpcStatus.PERMISSION_DENIED);
    assert.equal(denied?.reason, "operation_not_allowed");
    assert.equal(invalid?.outcome, "invalid_request");
    assert.equal(invalid?.httpStatus, 400);
    assert.ok((allowed?.durationMs ?? -1) >= 0);
  });
});

describe("ext_authz Check: deadlines and lifecycle", () => {
  test("the caller's shorter gRPC deadline wins over deadlineMs: the deny still arrives", async () => {
    const harness = await startHarness({
      check: (_input, signal) => allowWhenAborted(signal),
      deadlineMs: 60_000,
    });
    try {
      const response = await unary(harness.client, checkMethod, envoyCheckRequest({}), 1_000);
      assert.equal(response.http_response, "denied_response");
      assert.equal(deniedBody(response).reason, "upstream_unavailable");
    } finally {
      await harness.close();
    }
  });

  test("a throwing onDecision hook does not change the answer", async () => {
    const harness = await startHarness({
      check: async () => allowDecision,
      onDecision: () => {
        throw new Error("metrics down");
      },
    });
    try {
      const response = await unary(harness.client, checkMethod, envoyCheckRequest({}));
      assert.equal(response.status.code, 0);
    } finally {
      await harness.close();
    }
  });

  test("close drains an in-flight call before shutting down", async () => {
    let release: () => void = () => {};
    let started: () => void = () => {};
    const running = new Promise<void>((resolve) => {
      started = resolve;
    });
    const harness = await startHarness({
      deadlineMs: 10_000,
      check: () =>
        new Promise<CheckDecision>((resolve) => {
          release = () => resolve(allowDecision);
          started();
        }),
    });
    const call = unary(harness.client, checkMethod, envoyCheckRequest({}));
    await running;
    assert.equal(harness.server.inFlight, 1);
    const closed = harness.server.close({ graceMs: 10_000 });
    release();
    const response = await call;
    assert.equal(response.status.code, 0);
    await closed;
    harness.client.close();
    assert.equal(harness.server.inFlight, 0);
  });

  test("calls waiting for a decision are counted until each ends, whatever order they end in", async () => {
    // Five calls wait; they end out of order (middle, last, first, …), one of them cancelled
    // by its caller: each leaves the count of waiting calls once, and close finds none left.
    const releases = new Map<string, () => void>();
    const harness = await startHarness({
      deadlineMs: 10_000,
      check: (input) =>
        new Promise<CheckDecision>((resolve) => {
          releases.set(input.path, () => resolve(allowDecision));
        }),
    });
    try {
      const paths = ["/a", "/b", "/c", "/d", "/e"];
      const calls = new Map(paths.map((path) => [path, cancellableCheck(harness, path)] as const));
      await waitUntil(() => releases.size === 5);
      assert.equal(harness.server.inFlight, 5);
      for (const [path, left] of [
        ["/c", 4],
        ["/e", 3],
        ["/a", 2],
      ] as const) {
        releases.get(path)?.();
        assert.equal((await calls.get(path)?.answer)?.http_response, "ok_response");
        assert.equal(harness.server.inFlight, left);
      }
      calls.get("/b")?.cancel();
      await assert.rejects(calls.get("/b")?.answer as Promise<unknown>);
      await waitUntil(() => harness.server.inFlight === 1);
      releases.get("/b")?.();
      releases.get("/d")?.();
      assert.equal((await calls.get("/d")?.answer)?.http_response, "ok_response");
      assert.equal(harness.server.inFlight, 0);
    } finally {
      await harness.close();
    }
  });

  test("close force-stops after the grace period and aborts the decision function", async () => {
    let signalSeen: AbortSignal | undefined;
    let started: () => void = () => {};
    const running = new Promise<void>((resolve) => {
      started = resolve;
    });
    const harness = await startHarness({
      deadlineMs: 60_000,
      check: (_input, signal) => {
        signalSeen = signal;
        started();
        return allowWhenAborted(signal);
      },
    });
    const call = unary(harness.client, checkMethod, envoyCheckRequest({}), 30_000).then(
      (response) => ({ response }),
      (error: ServiceError) => ({ error }),
    );
    await running;
    await harness.server.close({ graceMs: 50 });
    const outcome = await call;
    harness.client.close();
    assert.equal(signalSeen?.aborted, true);
    // The connection was cut: the client sees a transport error, never an allow.
    assert.ok("error" in outcome, "expected a transport error after forced shutdown");
  });

  test("options are validated at construction; the deadline and the logger are required", () => {
    const valid = { check: async () => allowDecision, deadlineMs: DECISION_TIMEOUT_MS, logger: silentLogger };
    const { deadlineMs: _deadline, ...withoutDeadline } = valid;
    const { logger: _logger, ...withoutLogger } = valid;
    const bad: unknown[] = [
      {},
      { ...valid, check: 5 },
      withoutDeadline,
      withoutLogger,
      { ...valid, deadlineMs: 0 },
      { ...valid, deadlineMs: 1.5 },
      { ...valid, onDecision: "x" },
      { ...valid, initialServingStatus: "MAYBE" },
    ];
    for (const options of bad) {
      assert.throws(
        () => createCheckServer(options as Parameters<typeof createCheckServer>[0]),
        (error: unknown) => error instanceof CheckServerError && error.code === "invalid_options",
      );
    }
  });

  test("listen twice is refused; listen after close is refused", async () => {
    const server = testCheckServer({ check: async () => allowDecision });
    await server.listen("127.0.0.1:0");
    await assert.rejects(server.listen("127.0.0.1:0"), { code: "already_listening" });
    await server.close({ graceMs: 100 });
    await assert.rejects(server.listen("127.0.0.1:0"), { code: "closed" });
  });

  test("a port already taken is a bind_failed error", async () => {
    const first = testCheckServer({ check: async () => allowDecision });
    const { port } = await first.listen("127.0.0.1:0");
    const second = testCheckServer({ check: async () => allowDecision });
    // grpc-js logs the failed bind to stderr; the assertion below is what matters.
    setLogVerbosity(logVerbosity.NONE);
    try {
      await assert.rejects(second.listen(`127.0.0.1:${port}`), { code: "bind_failed" });
    } finally {
      setLogVerbosity(logVerbosity.ERROR);
      await second.close({ graceMs: 100 });
      await first.close({ graceMs: 100 });
    }
  });
});
