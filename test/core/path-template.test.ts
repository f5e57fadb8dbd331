import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import {
  createPathMatcher,
  encodePathSegment,
  isValidPathTemplate,
  MAX_REQUEST_PATH_LENGTH,
  normalizeRequestPath,
  PathTemplateError,
  parsePathTemplate,
} from "../../src/core/path-template.ts";

const segments = (raw: string) => normalizeRequestPath(raw)?.segments;

describe("normalizeRequestPath", () => {
  it("strips query and fragment, collapses slashes, drops a trailing slash", () => {
    assert.deepEqual(normalizeRequestPath("/users/42?x=1#top"), {
      path: "/users/42",
      segments: ["users", "42"],
    });
    assert.deepEqual(segments("//users///42/"), ["users", "42"]);
    assert.deepEqual(normalizeRequestPath("/"), { path: "/", segments: [] });
    assert.deepEqual(normalizeRequestPath("///"), { path: "/", segments: [] });
    assert.deepEqual(normalizeRequestPath("/?a=/../b"), { path: "/", segments: [] });
    assert.deepEqual(segments("/a#/../x?y"), ["a"]);
  });

  it("decodes each segment once, after splitting, with either hex case", () => {
    assert.deepEqual(segments("/caf%C3%A9/a%20b"), ["café", "a b"]);
    assert.deepEqual(segments("/caf%c3%a9"), ["café"]);
    assert.deepEqual(segments("/%2541"), ["%41"]);
    assert.equal(normalizeRequestPath("/caf%c3%a9/%7bid%7D")?.path, "/caf%C3%A9/%7Bid%7D");
    assert.equal(normalizeRequestPath("/a:b@c;d=e+f,g$h&i")?.path, "/a:b@c;d=e+f,g$h&i");
  });

  it("refuses dot segments in every spelling", () => {
    for (const raw of [
      "/a/./b",
      "/a/../b",
      "/..",
      "/.",
      "/a/%2e/b",
      "/a/%2E%2e/b",
      "/a/.%2E",
      "/a/..;/b",
      "/a/%2e%2e;x=1/b",
      "/a/.;/b",
    ]) {
      assert.equal(normalizeRequestPath(raw), undefined, raw);
    }
    assert.deepEqual(segments("/a/.../b"), ["a", "...", "b"]);
    assert.deepEqual(segments("/a/.well-known"), ["a", ".well-known"]);
  });

  it("refuses encoded slashes, backslashes, NUL, controls and bad escapes", () => {
    for (const raw of [
      "/a%2Fb",
      "/a%2fb",
      "/a%5Cb",
      "/a\\b",
      "/a%00",
      "/a%0a",
      "/a%7F",
      "/a%",
      "/a%2",
      "/a%zz",
      "/a%C3",
      "/a%C0%AF",
      "/a%ED%A0%80",
      "/a b",
      "/a\tb",
      "/café",
      "users/1",
      "",
      "?x",
      `/${"a".repeat(MAX_REQUEST_PATH_LENGTH)}`,
      `/${"a/".repeat(300)}`,
    ]) {
      assert.equal(normalizeRequestPath(raw), undefined, JSON.stringify(raw.slice(0, 40)));
    }
    assert.equal(normalizeRequestPath(42), undefined);
  });

  it("property: normalization is idempotent and hex case does not matter", () => {
    const raw = fc
      .array(fc.string({ unit: "grapheme", maxLength: 8 }), { maxLength: 8 })
      .map((parts) => `/${parts.map((p) => encodeURIComponent(p)).join("/")}`);
    fc.assert(
      fc.property(raw, fc.boolean(), (path, lower) => {
        const first = normalizeRequestPath(path);
        const recased = path.replace(/%[0-9A-F]{2}/g, (m) => (lower ? m.toLowerCase() : m));
        assert.deepEqual(normalizeRequestPath(recased), first);
        if (first !== undefined) assert.deepEqual(normalizeRequestPath(first.path), first);
      }),
      { numRuns: 500 },
    );
  });

  it("property: decoded segments re-encode to themselves", () => {
    fc.assert(
      fc.property(fc.string({ unit: "grapheme", minLength: 1, maxLength: 12 }), (text) => {
        const normalized = normalizeRequestPath(`/${encodePathSegment(text)}`);
        if (normalized !== undefined) assert.deepEqual(normalized.segments, [text]);
      }),
      { numRuns: 500 },
    );
  });

  it("property: a path without escapes normalizes as its percent-encoded spelling does", () => {
    // The unescaped spelling takes the fast path; escaping one character forces the decoding
    // path. Both must agree, including on dot segments and limits.
    const plainChar = fc.constantFrom(..."az09-._~!*'()$&+,:;=@/".split(""), ".", "/", ";");
    const path = fc.array(plainChar, { minLength: 1, maxLength: 24 }).map((chars) => `/${chars.join("")}`);
    fc.assert(
      fc.property(path, fc.nat(), (plain, at) => {
        const index = 1 + (at % (plain.length - 1 || 1));
        const char = plain[index] ?? "";
        const escaped =
          char === "" || char === "/"
            ? plain
            : `${plain.slice(0, index)}%${char.charCodeAt(0).toString(16).toUpperCase()}${plain.slice(index + 1)}`;
        assert.deepEqual(
          normalizeRequestPath(plain),
          normalizeRequestPath(escaped),
          `${plain} vs ${escaped}`,
        );
      }),
      { numRuns: 2000 },
    );
  });
});

describe("path templates", () => {
  it("validates templates", () => {
    assert.ok(isValidPathTemplate("/"));
    assert.ok(isValidPathTemplate("/users/{id}"));
    assert.ok(isValidPathTemplate("/files/{name}.{ext}"));
    assert.ok(isValidPathTemplate("/v1/{name}:cancel"));
    assert.ok(isValidPathTemplate("/users/"));
    for (const bad of [
      "",
      "users",
      "/a//b",
      "/a/{}",
      "/a/{b",
      "/a/b}",
      "/a/{b{c}}",
      "/a/{x}{y}",
      "/{id}/{id}",
      "/a/../b",
      "/a/%2e",
      "/a%2Fb",
      "/a?b",
      "/a#b",
      "/a b",
      "/{na me}",
    ]) {
      assert.equal(isValidPathTemplate(bad), false, bad);
    }
    assert.deepEqual(parsePathTemplate("/a/{x}/b{y}c").params, ["x", "y"]);
    assert.throws(() => parsePathTemplate("nope"), PathTemplateError);
  });

  it("prefers literal segments over parameters, left to right", () => {
    const matcher = createPathMatcher(["/users/{id}", "/users/me", "/{kind}/me/posts", "/users/{id}/posts"]);
    assert.deepEqual(matcher.match(undefined, "/users/me"), {
      template: "/users/me",
      method: undefined,
      params: {},
      index: 1,
      segments: ["users", "me"],
    });
    assert.deepEqual(matcher.match(undefined, "/users/42")?.params, { id: "42" });
    assert.equal(matcher.match(undefined, "/users/me/posts")?.template, "/users/{id}/posts");
    assert.equal(matcher.match(undefined, "/groups/me/posts")?.template, "/{kind}/me/posts");
    assert.equal(matcher.match(undefined, "/users"), undefined);
    assert.equal(matcher.match(undefined, "/users/1/2"), undefined);
  });

  it("matches mixed segments and prefers them over whole-segment parameters", () => {
    const matcher = createPathMatcher(["/files/{name}.{ext}", "/files/{file}", "/files/v{n}.json"]);
    assert.deepEqual(matcher.match(undefined, "/files/report.tar.gz")?.params, {
      name: "report",
      ext: "tar.gz",
    });
    assert.equal(matcher.match(undefined, "/files/README")?.template, "/files/{file}");
    assert.equal(matcher.match(undefined, "/files/v2.json")?.template, "/files/v{n}.json");
    assert.equal(matcher.match(undefined, "/files/.json")?.template, "/files/{file}");
  });

  it("filters by method first and lets a method-bound route win a tie", () => {
    const matcher = createPathMatcher([
      { template: "/users/me", method: "GET" },
      { template: "/users/{id}", method: "delete" },
      { template: "/users/{id}", method: "GET" },
    ]);
    assert.equal(matcher.match("GET", "/users/me")?.template, "/users/me");
    assert.deepEqual(matcher.match("DELETE", "/users/me"), {
      template: "/users/{id}",
      method: "DELETE",
      params: { id: "me" },
      index: 1,
      segments: ["users", "me"],
    });
    assert.equal(matcher.match("POST", "/users/me"), undefined);
    assert.equal(matcher.match("BREW", "/users/me"), undefined);
  });

  it("decodes parameter values and matches literal segments after decoding", () => {
    const matcher = createPathMatcher(["/a%20b/{x}"]);
    assert.deepEqual(matcher.match(undefined, "/a%20b/caf%C3%A9")?.params, { x: "café" });
    assert.deepEqual(createPathMatcher(["/users/{id}"]).match(undefined, "/users/{id}")?.params, {
      id: "{id}",
    });
  });

  it("refuses overlapping templates and merges exact duplicates", () => {
    assert.throws(
      () => createPathMatcher(["/users/{id}", "/users/{name}"]),
      (e: unknown) => e instanceof PathTemplateError && e.code === "path_template_conflict",
    );
    assert.throws(
      () => createPathMatcher([{ template: "/a/{x}", method: "GET" }, "/a/{y}"]),
      PathTemplateError,
    );
    assert.throws(() => createPathMatcher(["/a", "/a/"]), PathTemplateError);
    createPathMatcher([
      { template: "/a/{x}", method: "GET" },
      { template: "/a/{y}", method: "POST" },
    ]);
    const merged = createPathMatcher(["/a/{x}", "/a/{x}"]);
    assert.equal(merged.match(undefined, "/a/1")?.index, 0);
    assert.throws(() => createPathMatcher([{ template: "/a", method: "FETCH" }]), PathTemplateError);
  });

  it("property: mixed segments match exactly when a backtracking regex would", () => {
    const literal = fc.constantFrom(".", "-", "v", "x", "ab", ".json");
    const shape = fc.tuple(fc.boolean(), fc.array(literal, { minLength: 1, maxLength: 3 }), fc.boolean());
    // "." and ".." are dot segments, which never match anything (the next property).
    const segment = fc.stringMatching(/^[.vxab1-]{1,10}$/).filter((v) => v !== "." && v !== "..");
    fc.assert(
      fc.property(shape, segment, ([lead, literals, trail], value) => {
        const parts: string[] = lead ? ["v"] : [];
        for (const [i, lit] of literals.entries()) parts.push(`{p${i}}`, lit);
        if (trail) parts.push(`{p${literals.length}}`);
        const template = `/${parts.join("")}`;
        const escaped = parts.map((p) =>
          p.startsWith("{") ? "(.+?)" : p.replace(/[.*+?^${}()|[\]\\-]/g, "\\$&"),
        );
        const reference = new RegExp(`^${escaped.join("")}$`);
        const matched = createPathMatcher([template]).match(undefined, `/${value}`);
        assert.equal(matched !== undefined, reference.test(value), `${template} ${value}`);
      }),
      { numRuns: 1000 },
    );
  });

  it("property: paths with dot segments or encoded slashes never match", () => {
    const matcher = createPathMatcher(["/{a}", "/{a}/{b}", "/{a}/{b}/{c}", "/{a}/{b}/{c}/{d}", "/x/{p}.{q}"]);
    const plain = fc.stringMatching(/^[A-Za-z0-9_~-]{1,6}$/);
    const dot = fc.constantFrom(".", "..", "%2e", "%2E", "%2e%2e", ".%2E", "%2E.", "..;", "%2e%2E;v=1");
    const slashy = fc
      .tuple(plain, fc.constantFrom("%2F", "%2f", "%5C", "%5c", "%00", "\\"), plain)
      .map(([a, s, b]) => a + s + b);
    fc.assert(
      fc.property(
        fc.array(plain, { maxLength: 3 }),
        fc.oneof(dot, slashy),
        fc.array(plain, { maxLength: 3 }),
        fc.boolean(),
        (before, bad, after, trailing) => {
          const path = `/${[...before, bad, ...after].join("/")}${trailing ? "/" : ""}`;
          assert.equal(normalizeRequestPath(path), undefined, path);
          assert.equal(matcher.match(undefined, path), undefined, path);
          assert.equal(matcher.match("GET", path), undefined, path);
        },
      ),
      { numRuns: 500 },
    );
  });
});
