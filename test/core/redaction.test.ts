import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import {
  applyRedactions,
  defaultSensitiveFieldRedaction,
  isSensitiveKey,
  maskValue,
  REPORTED_EVENT_PATH_MAX,
  REPORTED_EVENTS_MAX,
  RedactionError,
  redactResponseBody,
  reportedEvents,
  sanitizeResponseHeaders,
} from "../../src/core/redaction.ts";

const user = () => ({
  id: 7,
  email: "jane@example.com",
  phone: "5551234567",
  card: { number: "4111111111111111", brand: "visa" },
  tags: ["a", "b"],
  accounts: [
    { iban: "DE001234", balance: 10 },
    { iban: "FR009876", balance: 20 },
  ],
});

describe("applyRedactions", () => {
  it("removes and masks by JSON pointer, recording where but not what", () => {
    const body = user();
    const result = applyRedactions(body, [
      { path: "/email", mode: "remove" },
      { path: "/phone", mode: "mask", keep_last: 4 },
      { path: "/card/number", mode: "mask" },
    ]);
    const { email: _email, ...rest } = user();
    assert.deepEqual(result.body, {
      ...rest,
      phone: "******4567",
      card: { number: "****************", brand: "visa" },
    });
    assert.equal(Object.hasOwn(result.body as object, "email"), false);
    assert.deepEqual(result.events, [
      { path: "/email", mode: "remove", source: "operation" },
      { path: "/phone", mode: "mask", source: "operation" },
      { path: "/card/number", mode: "mask", source: "operation" },
    ]);
    assert.ok(!JSON.stringify(result.events).includes("jane"));
  });

  it("never mutates the input", () => {
    const body = user();
    const before = structuredClone(body);
    applyRedactions(body, [
      { path: "/accounts/*/iban", mode: "mask", keep_last: 2 },
      { path: "/tags/0", mode: "remove" },
    ]);
    assert.deepEqual(body, before);
  });

  it("supports '*' over array elements and object keys", () => {
    const result = applyRedactions(user(), [
      { path: "/accounts/*/iban", mode: "mask", keep_last: 2 },
      { path: "/card/*", mode: "remove" },
    ]);
    const body = result.body as ReturnType<typeof user>;
    assert.deepEqual(
      body.accounts.map((a) => a.iban),
      ["******34", "******76"],
    );
    assert.deepEqual(body.card, {});
    assert.deepEqual(
      result.events.map((e) => e.path),
      ["/accounts/0/iban", "/accounts/1/iban", "/card/number", "/card/brand"],
    );
  });

  it("removes array elements by index, and all of them with '*'", () => {
    assert.deepEqual(applyRedactions({ tags: ["a", "b", "c"] }, [{ path: "/tags/1", mode: "remove" }]).body, {
      tags: ["a", "c"],
    });
    assert.deepEqual(applyRedactions({ tags: ["a", "b", "c"] }, [{ path: "/tags/*", mode: "remove" }]).body, {
      tags: [],
    });
    assert.deepEqual(applyRedactions([{ s: 1 }, { s: 2 }], [{ path: "/*/s", mode: "remove" }]).body, [
      {},
      {},
    ]);
  });

  it("is a silent no-op for pointers that address nothing", () => {
    const result = applyRedactions(user(), [
      { path: "/missing", mode: "remove" },
      { path: "/card/number/deeper", mode: "mask" },
      { path: "/tags/5", mode: "mask" },
      { path: "/tags/01", mode: "mask" },
      { path: "/tags/-", mode: "remove" },
      { path: "/email/toString", mode: "remove" },
      { path: "/constructor", mode: "remove" },
      { path: "/__proto__", mode: "mask" },
    ]);
    assert.deepEqual(result.body, user());
    assert.deepEqual(result.events, []);
  });

  it("unescapes ~0 and ~1 and escapes them back in events", () => {
    const result = applyRedactions({ "a/b": { "c~d": "x" } }, [{ path: "/a~1b/c~0d", mode: "mask" }]);
    assert.deepEqual(result.body, { "a/b": { "c~d": "*" } });
    assert.deepEqual(result.events, [{ path: "/a~1b/c~0d", mode: "mask", source: "operation" }]);
  });

  it("treats a __proto__ key as data", () => {
    const body = JSON.parse('{"__proto__":{"secret":"s"},"x":1}');
    const result = applyRedactions(body, [{ path: "/__proto__/secret", mode: "mask" }]);
    assert.equal(JSON.stringify(result.body), '{"__proto__":{"secret":"*"},"x":1}');
    assert.equal(Object.getPrototypeOf(result.body), Object.prototype);
  });

  it("applies the empty pointer to the whole body", () => {
    assert.deepEqual(applyRedactions({ a: 1 }, [{ path: "", mode: "mask" }]).body, "*******");
    assert.equal(applyRedactions({ a: 1 }, [{ path: "", mode: "remove" }]).body, null);
  });

  it("refuses malformed rules instead of returning an unredacted body", () => {
    for (const rule of [
      { path: "email", mode: "remove" },
      { path: "/a~2", mode: "remove" },
      { path: "/a", mode: "hash" },
      { path: "/a", mode: "mask", keep_last: -1 },
      { path: "/a", mode: "mask", keep_last: 1.5 },
    ]) {
      assert.throws(
        () => applyRedactions({ a: "x" }, [rule as never]),
        (e: unknown) => e instanceof RedactionError && e.code === "redaction_rule_invalid",
      );
    }
  });
});

describe("maskValue", () => {
  it("keeps the last characters, counting code points", () => {
    assert.equal(maskValue("123456789", 4), "*****6789");
    assert.equal(maskValue("ab😀", 1), "**😀");
    assert.equal(maskValue("secret"), "******");
  });

  it("masks fully when keep_last reaches the length", () => {
    assert.equal(maskValue("1234", 4), "****");
    assert.equal(maskValue("12", 10), "**");
  });

  it("stringifies non-strings first", () => {
    assert.equal(maskValue(123456, 2), "****56");
    assert.equal(maskValue({ a: 1 }), "*******");
    assert.equal(maskValue(null), "****");
    assert.equal(maskValue(true, 1), "***e");
  });

  it("property: output length equals the input length and reveals at most keep_last", () => {
    fc.assert(
      fc.property(fc.string({ unit: "grapheme-ascii" }), fc.nat({ max: 40 }), (text, keep) => {
        const masked = maskValue(text, keep);
        assert.equal(masked.length, text.length);
        const visible = keep >= text.length ? 0 : keep;
        assert.equal(masked.slice(0, text.length - visible), "*".repeat(text.length - visible));
      }),
    );
  });
});

describe("default sensitive-field redaction", () => {
  it("recognizes sensitive keys in any case and spelling", () => {
    for (const key of [
      "password",
      "PASSWORD",
      "userPassword",
      "passwd",
      "client_secret",
      "clientSecret",
      "secret_key",
      "token",
      "access_token",
      "refreshToken",
      "idtoken",
      "api_key",
      "apiKey",
      "APIKey",
      "x-api-key",
      "Authorization",
      "access_key",
      "AccessKeyId",
      "private_key",
      "ssn",
      "SSN",
      "card_number",
      "cardNumber",
      "creditCard",
      "cc_number",
      "cvv",
      "session_cookie",
      "credentials",
    ]) {
      assert.ok(isSensitiveKey(key), key);
    }
    for (const key of [
      "id",
      "name",
      "email",
      "tokens",
      "total_tokens",
      "className",
      "passenger",
      "description",
    ]) {
      assert.ok(!isSensitiveKey(key), key);
    }
  });

  it("remembered answers stay right when the key memory fills and is cleared", () => {
    const sample = ["apiKey", "total_tokens", "client-secret", "name", "cvv2", "passenger"];
    const first = sample.map(isSensitiveKey);
    for (let i = 0; i < 10_000; i++) isSensitiveKey(i % 2 === 0 ? `field_${i}` : `secret_${i}`);
    assert.deepEqual(sample.map(isSensitiveKey), first);
    assert.deepEqual(first, [true, false, true, false, true, false]);
    assert.equal(isSensitiveKey("x".repeat(500)), false);
    assert.equal(isSensitiveKey(`${"x".repeat(500)}_password`), true);
  });

  it("masks at any depth, leaves null and booleans, records events, never mutates", () => {
    const body = {
      user: { name: "jane", password: "hunter2", profile: { api_key: 12345 } },
      sessions: [{ token: "abc" }, { token: null }],
      has_password: true,
      secret: { nested: "x" },
    };
    const before = structuredClone(body);
    const result = defaultSensitiveFieldRedaction(body);
    assert.deepEqual(body, before);
    assert.deepEqual(result.body, {
      user: { name: "jane", password: "*******", profile: { api_key: "*****" } },
      sessions: [{ token: "***" }, { token: null }],
      has_password: true,
      secret: "**************",
    });
    assert.deepEqual(
      result.events.map((e) => [e.path, e.mode, e.source]),
      [
        ["/user/password", "mask", "default"],
        ["/user/profile/api_key", "mask", "default"],
        ["/sessions/0/token", "mask", "default"],
        ["/secret", "mask", "default"],
      ],
    );
  });

  it("handles deeply nested bodies without overflowing", () => {
    let body: unknown = { password: "x" };
    for (let i = 0; i < 20000; i++) body = { next: body };
    const result = defaultSensitiveFieldRedaction(body);
    assert.equal(result.events.length, 1);
  });

  it("redactResponseBody: operation rules first, then defaults that respect them", () => {
    const result = redactResponseBody({ card_number: "4111111111111111", password: "p", email: "e@x" }, [
      { path: "/card_number", mode: "mask", keep_last: 4 },
      { path: "/email", mode: "remove" },
    ]);
    assert.deepEqual(result.body, { card_number: "************1111", password: "*" });
    assert.deepEqual(
      result.events.map((e) => `${e.source}:${e.mode}:${e.path}`),
      ["operation:mask:/card_number", "operation:remove:/email", "default:mask:/password"],
    );
  });
});

describe("sanitizeResponseHeaders", () => {
  it("drops sensitive and hop-by-hop headers case-insensitively, with events for the sensitive ones", () => {
    const result = sanitizeResponseHeaders({
      "Content-Type": "application/json",
      "Set-Cookie": ["a=1", "b=2"],
      Server: "nginx/1.25",
      "X-Powered-By": "Express",
      "WWW-Authenticate": "Bearer",
      "X-Api-Key": "k",
      "X-Upstream-Session-Token": "t",
      Connection: "keep-alive, X-Internal",
      "X-Internal": "1",
      "Keep-Alive": "timeout=5",
      "Transfer-Encoding": "chunked",
      "Content-Length": 42,
      "X-Request-Id": "r-1",
      "Cache-Control": "no-store",
      Vary: ["Accept", "Origin"],
      Empty: undefined,
    });
    assert.deepEqual(result.headers, {
      "content-type": "application/json",
      "x-request-id": "r-1",
      "cache-control": "no-store",
      vary: ["Accept", "Origin"],
    });
    assert.deepEqual(
      result.events.map((e) => e.path).sort(),
      [
        "set-cookie",
        "server",
        "x-powered-by",
        "www-authenticate",
        "x-api-key",
        "x-upstream-session-token",
      ].sort(),
    );
    assert.ok(result.events.every((e) => e.mode === "remove" && e.source === "header"));
  });
});

describe("reportedEvents", () => {
  it("reports a bounded list however many members an upstream's answer makes sensitive, and how deep", () => {
    // An upstream's answer: a 2,000-character key path with 5,000 sensitive members under it.
    const leaf: Record<string, string> = {};
    for (let i = 0; i < 5000; i++) leaf[`password${i}`] = "hunter2";
    const body = { ["k".repeat(2000)]: leaf };
    const { body: masked, events } = redactResponseBody(body, []);
    assert.equal(events.length, 5000, "every member is masked");
    assert.ok(
      Object.values((masked as Record<string, Record<string, string>>)["k".repeat(2000)] ?? {}).every(
        (v) => v !== "hunter2",
      ),
    );
    const reported = reportedEvents(events);
    assert.equal(reported.length, REPORTED_EVENTS_MAX);
    for (const event of reported)
      assert.ok(event.path.length <= REPORTED_EVENT_PATH_MAX + 1, event.path.slice(0, 20));
    assert.ok(JSON.stringify(reported).length < 64 * 1024);
  });

  it("keeps short lists and paths as they are", () => {
    const events = redactResponseBody({ password: "x", card: { cvv: "123" } }, []).events;
    assert.deepEqual(reportedEvents(events), events);
  });
});
