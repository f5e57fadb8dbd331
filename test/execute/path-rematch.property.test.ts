/**
 * Cross-path property of the path rule (issue 15, item 4): random catalogs with literal and
 * parameter siblings, random policies, random and adversarial parameter values, sent both as
 * a concrete request path (ext_authz, proxy, invoke by method + path) and as a template
 * with separate values (authorize → invoke by permission id, broker, MCP). Whenever the
 * decision allows and the request is rendered, the rendered request maps back to exactly the
 * allowed permission — in our matcher and in a model of a *lenient* upstream router that
 * folds case and compatibility forms, drops `;…`, a `.ext` suffix and trailing whitespace or
 * dots, and decodes once more.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import type { Capability } from "../../src/core/capability.ts";
import { decide } from "../../src/core/decision.ts";
import type { HttpMethod } from "../../src/core/http-method.ts";
import type { OperationSnapshot } from "../../src/core/operation-snapshot.ts";
import { createPathMatcher, encodePathSegment, parsePathTemplate } from "../../src/core/path-template.ts";
import { ExecutionError } from "../../src/execute/errors.ts";
import { renderUpstreamRequest } from "../../src/execute/url.ts";
import { CAPABILITY_ID, capability, entry, NOW, pid, policyV1, snapshot } from "../core/fixtures.ts";
import { decodeOnce, fullWidth, lenientRoute } from "../helpers/lenient-router.ts";

const LITERALS = ["things", "me", "admin", "items", "export"] as const;
const METHODS: readonly HttpMethod[] = ["GET", "DELETE"];

/* ---------- generators ---------- */

const segmentArb = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom(...LITERALS) },
  { weight: 2, arbitrary: fc.constant("{p}") },
  { weight: 1, arbitrary: fc.constantFrom("{p}.json", "v{p}") },
);
const templateArb = fc
  .array(segmentArb, { minLength: 1, maxLength: 3 })
  .map((segments) => `/${segments.map((s, i) => s.replace("{p}", `{p${i}}`)).join("/")}`);

interface World {
  readonly capability: Capability;
  readonly operations: readonly OperationSnapshot[];
  readonly allowed: OperationSnapshot;
}

const worldArb: fc.Arbitrary<World | undefined> = fc
  .uniqueArray(fc.record({ method: fc.constantFrom(...METHODS), path: templateArb }), {
    minLength: 1,
    maxLength: 8,
    selector: (op) => `${op.method} ${op.path}`,
  })
  .chain((ops) => fc.record({ ops: fc.constant(ops), pick: fc.nat({ max: ops.length - 1 }) }))
  .map(({ ops, pick }) => {
    try {
      createPathMatcher(ops.map((op) => ({ template: op.path, method: op.method })));
    } catch {
      return undefined; // an overlapping catalog is refused at import
    }
    const operations = ops.map((op) => snapshot(op.method, op.path));
    const allowed = operations[pick];
    if (allowed === undefined) return undefined;
    return { capability: capability(operations), operations, allowed };
  });

/** Ordinary values, sibling literals and the spellings upstreams reduce to them. */
const valueArb = fc.oneof(
  fc.constantFrom("cus_00000001", "john.doe", "José", "日本", "42", "a b", "100%", ".", ".."),
  fc.constantFrom(...LITERALS),
  fc
    .tuple(
      fc.constantFrom(...LITERALS),
      fc.constantFrom(
        (s: string) => s.toUpperCase(),
        (s: string) => s[0]?.toUpperCase() + s.slice(1),
        (s: string) => `${s};jsessionid=1`,
        (s: string) => `${s}.json`,
        (s: string) => `${s} `,
        (s: string) => `${s}.`,
        (s: string) => `${s}%2e`,
        (s: string) => `${s}%20`,
        (s: string) => `${s}\u200B`,
        (s: string) => `\u00AD${s}`,
        (s: string) => `${s}::$DATA`,
        (s: string) => `${s}~`,
        (s: string) => `${s}.json.bak`,
        (s: string) => encodeURIComponent(s).replace(/^./, (c) => `%${c.charCodeAt(0).toString(16)}`),
        fullWidth,
      ),
    )
    .map(([literal, spell]) => spell(literal)),
  fc.string({ minLength: 1, maxLength: 6 }),
  fc.string({ minLength: 1, maxLength: 4, unit: "grapheme" }),
);

function paramsOf(template: string): readonly string[] {
  return parsePathTemplate(template).params;
}

function routeOf(world: World) {
  return {
    capability: world.capability,
    permissionId: pid(world.allowed.method, world.allowed.path),
    operation: world.allowed,
  };
}

const templates = (world: World) => world.operations.map((op) => op.path);

/** The rendered upstream path relative to the fixtures' base (/v1), segments decoded once. */
function sentSegments(url: URL): string[] {
  return url.pathname
    .split("/")
    .filter((s) => s.length > 0)
    .slice(1)
    .map(decodeOnce);
}

function renderOrRefuse(world: World, path: Record<string, string>): URL | undefined {
  try {
    return renderUpstreamRequest(routeOf(world), { path });
  } catch (error) {
    assert.ok(error instanceof ExecutionError, String(error));
    assert.ok(["ambiguous_path", "invalid_input"].includes(error.reason), error.reason);
    return undefined;
  }
}

function decideFor(world: World, path: string, pathIsTemplate: boolean) {
  const policy = policyV1([
    entry([[world.allowed.method, world.allowed.path]], { operations: [world.allowed] }),
  ]);
  return decide({
    subjectId: "agent-7",
    capabilityId: CAPABILITY_ID,
    capability: world.capability,
    policy: { ok: true, document: policy },
    method: world.allowed.method,
    path,
    now: NOW,
    pathIsTemplate,
  });
}

describe("path rule: a rendered request maps to exactly the allowed permission", () => {
  it("template form (authorize, invoke by permission id, broker, MCP): render + re-match", () => {
    fc.assert(
      fc.property(worldArb, fc.array(valueArb, { minLength: 3, maxLength: 3 }), (world, values) => {
        if (world === undefined) return;
        const decision = decideFor(world, world.allowed.path, true);
        assert.equal(decision.status, "allowed");
        const path = Object.fromEntries(
          paramsOf(world.allowed.path).map((name, i) => [name, values[i] ?? "x"]),
        );
        const url = renderOrRefuse(world, path);
        if (url === undefined) return;
        assert.equal(lenientRoute(templates(world), sentSegments(url)), world.allowed.path, url.pathname);
      }),
      { numRuns: 600 },
    );
  });

  it("concrete form (ext_authz, proxy, invoke by path): decide's allow renders, re-matches and routes the same", () => {
    fc.assert(
      fc.property(
        worldArb,
        fc.array(valueArb, { minLength: 3, maxLength: 3 }),
        fc.boolean(),
        (world, values, raw) => {
          if (world === undefined) return;
          const parsed = parsePathTemplate(world.allowed.path);
          let v = 0;
          // The attacker's spelling: encoded like a client would, or as raw as a request line allows.
          const requestPath = `/${parsed.segments
            .map((segment) => {
              if (segment.kind === "literal") return segment.value;
              const value = values[v++] ?? "x";
              return raw && /^[\x21-\x7e]+$/.test(value) && !/[/?#]/.test(value)
                ? value
                : encodePathSegment(value);
            })
            .join("/")}`;
          const decision = decideFor(world, requestPath, false);
          if (decision.status !== "allowed") return;
          // Our matcher chose the allowed permission; what we send must route there too.
          const url = renderUpstreamRequest(routeOf(world), { path: { ...decision.params } });
          assert.equal(lenientRoute(templates(world), sentSegments(url)), world.allowed.path, url.pathname);
          for (const value of Object.values(decision.params)) {
            for (const form of [
              value,
              decodeOnce(value),
              value.normalize("NFKC"),
              decodeOnce(value).normalize("NFKC"),
            ]) {
              assert.ok(!/[/?#;\\]/.test(form), JSON.stringify(value));
            }
          }
        },
      ),
      { numRuns: 600 },
    );
  });

  it("both forms agree: a value is refused as ambiguous_path in a concrete path exactly when its rendering is", () => {
    fc.assert(
      fc.property(worldArb, fc.array(valueArb, { minLength: 3, maxLength: 3 }), (world, values) => {
        if (world === undefined) return;
        const names = paramsOf(world.allowed.path);
        const path = Object.fromEntries(names.map((name, i) => [name, values[i] ?? "x"]));
        const parsed = parsePathTemplate(world.allowed.path);
        let v = 0;
        // The same values in both forms: a mixed segment ("{p1}.json") keeps its literal parts.
        const requestPath = `/${parsed.segments
          .map((segment) => {
            if (segment.kind === "literal") return segment.value;
            if (segment.kind === "param") return encodePathSegment(values[v++] ?? "x");
            return segment.parts
              .map((part) => ("literal" in part ? part.literal : encodePathSegment(values[v++] ?? "x")))
              .join("");
          })
          .join("/")}`;
        const concrete = decideFor(world, requestPath, false);
        const concreteReason = concrete.status === "allowed" ? "allowed" : concrete.reason;
        // Refused by normalization (dot segments, %2F) or mapped to another operation: another question.
        if (concreteReason !== "allowed" && concreteReason !== "ambiguous_path") return;
        if (concrete.status === "allowed" && concrete.permissionId !== routeOf(world).permissionId) return;
        let rendered: string;
        try {
          renderUpstreamRequest(routeOf(world), { path });
          rendered = "allowed";
        } catch (error) {
          assert.ok(error instanceof ExecutionError);
          rendered = error.reason;
        }
        assert.equal(rendered, concreteReason, `${requestPath} ${JSON.stringify(path)}`);
      }),
      { numRuns: 600 },
    );
  });
});
