import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { ExecutionError } from "../../src/execute/errors.ts";
import { allowedRoute, buildUpstreamUrl, renderUpstreamRequest } from "../../src/execute/url.ts";
import { capability, pid, snapshot } from "../core/fixtures.ts";

const template = (upstream_url_template: string) => ({ upstream_url_template });
const users = template("https://api.example.com/v1/users/{id}/posts/{postId}");

// Characters that matter to URL parsing, plus ordinary ones, non-ASCII and controls.
const risky = fc.oneof(
  fc.constantFrom(
    "/",
    "?",
    "#",
    "%",
    ".",
    ";",
    "\\",
    "@",
    ":",
    "&",
    "=",
    "+",
    " ",
    "é",
    "😀",
    "\u0000",
    "\n",
  ),
  fc.string({ minLength: 1, maxLength: 1 }),
);

function reason(fn: () => unknown): string {
  try {
    fn();
  } catch (error) {
    assert.ok(error instanceof ExecutionError);
    return error.reason;
  }
  assert.fail("expected an ExecutionError");
}

describe("buildUpstreamUrl", () => {
  it("renders path parameters and appends query parameters", () => {
    const url = buildUpstreamUrl(users, {
      path: { id: "alice", postId: 42 },
      query: { limit: 10, tags: ["a b", "c&d"], draft: false },
    });
    assert.equal(
      url.toString(),
      "https://api.example.com/v1/users/alice/posts/42?limit=10&tags=a+b&tags=c%26d&draft=false",
    );
  });

  it("keeps the template's own query and port", () => {
    const url = buildUpstreamUrl(template("http://127.0.0.1:8443/api/{x}?version=2"), {
      path: { x: "y" },
      query: { q: "1" },
    });
    assert.equal(url.toString(), "http://127.0.0.1:8443/api/y?version=2&q=1");
  });

  for (const value of [
    "../admin",
    "a/b",
    "%2F",
    "?x=1",
    "#frag",
    "..%2F..%2Fadmin",
    "a\\b",
    "%2e%2e",
    "x;y",
  ]) {
    it(`keeps ${JSON.stringify(value)} inside one path segment`, () => {
      const url = buildUpstreamUrl(users, { path: { id: value, postId: "p" } });
      assert.equal(url.origin, "https://api.example.com");
      assert.equal(url.search, "");
      assert.equal(url.hash, "");
      const segments = url.pathname.split("/");
      assert.deepEqual(segments.slice(0, 3), ["", "v1", "users"]);
      assert.equal(segments.length, 6);
      assert.equal(decodeURIComponent(segments[3] ?? ""), value);
      assert.deepEqual(segments.slice(4), ["posts", "p"]);
    });
  }

  // A dot segment or an empty value is ambiguous_path, as decide() says of the same value.
  for (const [value, expected] of [
    [".", "ambiguous_path"],
    ["..", "ambiguous_path"],
    [".;x", "ambiguous_path"],
    ["..;jsessionid=1", "ambiguous_path"],
    ["", "ambiguous_path"],
  ] as const) {
    it(`refuses the path value ${JSON.stringify(value)}: ${expected}`, () => {
      assert.equal(
        reason(() => buildUpstreamUrl(users, { path: { id: value, postId: "p" } })),
        expected,
      );
    });
  }

  it("refuses missing, extra and non-scalar path values", () => {
    assert.equal(
      reason(() => buildUpstreamUrl(users, { path: { id: "a" } })),
      "invalid_input",
    );
    assert.equal(
      reason(() => buildUpstreamUrl(users, { path: { id: "a", postId: "b", other: "c" } })),
      "invalid_input",
    );
    assert.equal(
      reason(() => buildUpstreamUrl(users, { path: { id: { a: 1 }, postId: "b" } })),
      "invalid_input",
    );
    assert.equal(
      reason(() => buildUpstreamUrl(users, { path: { id: "\ud800", postId: "b" } })),
      "invalid_input",
    );
    assert.equal(
      reason(() => buildUpstreamUrl(users, { path: { id: "a", postId: "b" }, query: { q: { a: 1 } } })),
      "invalid_input",
    );
  });

  it("cannot be steered to another origin or path by any string", () => {
    fc.assert(
      fc.property(fc.string({ minLength: 1, unit: risky }), fc.string({ unit: risky }), (id, q) => {
        fc.pre(id !== "." && id !== ".." && !id.startsWith(".;") && !id.startsWith("..;"));
        const url = buildUpstreamUrl(users, { path: { id, postId: "p" }, query: { q } });
        assert.equal(url.origin, "https://api.example.com");
        const segments = url.pathname.split("/");
        assert.equal(segments.length, 6);
        assert.equal(decodeURIComponent(segments[3] ?? ""), id);
        assert.equal(url.searchParams.get("q"), q);
      }),
    );
  });

  it("accepts only http and https templates without credentials or placeholders outside the path", () => {
    for (const bad of [
      "ftp://example.com/{id}",
      "file:///etc/{id}",
      "https://user:pw@example.com/{id}",
      "https://{host}.example.com/x",
      "https://example.com/x?q={id}",
      "https://example.com/x#{id}",
      "https://example.com/{id}/{id}",
      "https://example.com/{id",
      "not a url",
    ]) {
      assert.equal(
        reason(() => buildUpstreamUrl(template(bad), { path: { id: "a", host: "evil" } })),
        "invalid_operation_snapshot",
        bad,
      );
    }
  });
});

describe("renderUpstreamRequest", () => {
  const op = (method: "GET" | "DELETE", path: string) =>
    snapshot(method, path, { upstream_url_template: `https://api.example.com/base/v1${path}` });
  const byId = op("GET", "/things/{id}");
  const catalog = capability([byId, op("GET", "/things/me"), op("DELETE", "/things/admin")]);
  const route = { capability: catalog, permissionId: pid("GET", "/things/{id}"), operation: byId };

  it("renders values that map back to the allowed permission", () => {
    for (const id of ["cus_00000001", "john.doe", "José", "日本", "a b", "100%"]) {
      const url = renderUpstreamRequest(route, { path: { id } });
      assert.equal(url.origin, "https://api.example.com");
      assert.equal(decodeURIComponent(url.pathname.split("/")[4] ?? ""), id);
    }
  });

  for (const id of [
    "me",
    "Me",
    "ME",
    "ＭＥ",
    "me.json",
    "me ",
    "me.",
    "me;jsessionid=1",
    "%2e",
    "admin",
    "a%2Fb",
    "me%2e",
  ]) {
    it(`refuses ${JSON.stringify(id)} with ambiguous_path`, () => {
      assert.equal(
        reason(() => renderUpstreamRequest(route, { path: { id } })),
        "ambiguous_path",
      );
    });
  }

  it("refuses a snapshot whose parameters sit in the upstream base path", () => {
    const tenant = snapshot("GET", "/things/{id}", {
      upstream_url_template: "https://api.example.com/{tenant}/things/{id}",
    });
    const r = {
      capability: capability([tenant]),
      permissionId: pid("GET", "/things/{id}"),
      operation: tenant,
    };
    assert.equal(
      reason(() => renderUpstreamRequest(r, { path: { id: "x", tenant: "t" } })),
      "ambiguous_path",
    );
  });

  it("matches the API path when the upstream names the operation differently", () => {
    const moved = snapshot("GET", "/things/{id}", {
      upstream_url_template: "https://api.example.com/items/{id}",
    });
    const r = { capability: capability([moved]), permissionId: pid("GET", "/things/{id}"), operation: moved };
    assert.equal(renderUpstreamRequest(r, { path: { id: "x" } }).pathname, "/items/x");
    const withSibling = { ...r, capability: capability([moved, snapshot("GET", "/things/me")]) };
    assert.equal(
      reason(() => renderUpstreamRequest(withSibling, { path: { id: "ME" } })),
      "ambiguous_path",
    );
  });

  it("fails closed without the decision's catalog", () => {
    assert.equal(
      reason(() => allowedRoute(undefined, route.permissionId, byId)),
      "ambiguous_path",
    );
  });
});
