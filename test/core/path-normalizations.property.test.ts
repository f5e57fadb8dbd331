/**
 * The path rule against the documented list of upstream normalizations (docs/core.md,
 * "Ambiguous path values"; issue 26, item 8). A catalog has `GET /files/{name}` allowed and
 * literal siblings (`GET` or `DELETE /files/<s>`) not allowed. For every sibling `s` and every
 * normalization N of the list, a value `v` built so that N(v) == s is never allowed through
 * the template — neither as a concrete path (ext_authz, proxy, invoke by path: decide()) nor
 * as an argument of the template (invoke by permission id, broker, MCP: the render + re-match
 * of renderUpstreamRequest). Values that map onto no sibling are unaffected.
 *
 * Each generator builds `v` from `s` by inverting N with an independent model (code point
 * tables scanned here, not the implementation's functions) and checks N(v) == s where N is a
 * plain function of the platform.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { decide } from "../../src/core/decision.ts";
import type { HttpMethod } from "../../src/core/http-method.ts";
import { encodePathSegment } from "../../src/core/path-template.ts";
import { ExecutionError } from "../../src/execute/errors.ts";
import { renderUpstreamRequest } from "../../src/execute/url.ts";
import { CAPABILITY_ID, capability, entry, NOW, pid, policyV1, snapshot } from "./fixtures.ts";

const NUM_RUNS = Number(process.env.PATH_NORMALIZATION_RUNS ?? 300);
const TEMPLATE = "/files/{name}";

/* ---------- code point tables (independent of src/) ---------- */

/** Default-ignorable code points (Unicode DerivedCoreProperties), a sample across the blocks. */
// biome-ignore format: one table
const IGNORABLES = [
  "\u00AD", "\u034F", "\u061C", "\u115F", "\u180B", "\u180E", "\u200B", "\u200C", "\u200D", "\u200E",
  "\u200F", "\u202A", "\u202E", "\u2060", "\u2061", "\u2064", "\u206A", "\u206F", "\uFE00", "\uFE0F",
  "\uFEFF", "\u{1D173}", "\u{E0001}", "\u{E0041}", "\u{E01EF}",
];

/** Code points whose compatibility form (NFKC) is exactly one given ASCII character. */
const compatForms = new Map<string, string[]>();
/** Code points a per-character case-insensitive comparison equates with an ASCII character. */
const caseForms = new Map<string, string[]>();
for (let cp = 0x80; cp <= 0x1ffff; cp++) {
  if (cp >= 0xd800 && cp <= 0xdfff) continue;
  const c = String.fromCodePoint(cp);
  const compat = c.normalize("NFKC");
  if (compat.length === 1 && compat < "\u0080" && compat !== c) {
    compatForms.set(compat, [...(compatForms.get(compat) ?? []), c]);
  }
  const lower = c.toLowerCase();
  const upper = c.toUpperCase();
  for (const ascii of [lower, upper.toLowerCase()]) {
    if (ascii.length === 1 && /[a-z]/.test(ascii)) caseForms.set(ascii, [...(caseForms.get(ascii) ?? []), c]);
  }
}
// Java's Character.toLowerCase('İ') is 'i' (the simple mapping; JavaScript's full one adds U+0307).
caseForms.set("i", [...(caseForms.get("i") ?? []), "\u0130"]);
for (const c of "abcdefghijklmnopqrstuvwxyz")
  caseForms.set(c, [...(caseForms.get(c) ?? []), c.toUpperCase()]);

/* ---------- normalizations: N, and an arbitrary of values v with N(v) == s ---------- */

interface Normalization {
  readonly name: string;
  /** Values that N maps onto `s`. */
  readonly spell: (s: string) => fc.Arbitrary<string>;
  /** N itself, where it is a function (a plain platform operation), to check the generator. */
  readonly apply?: (v: string) => string;
}

/** Replaces characters of `s` at random by alternatives from `table`. */
function substitute(s: string, table: ReadonlyMap<string, readonly string[]>): fc.Arbitrary<string> {
  const chars = [...s];
  return fc
    .tuple(...chars.map((c) => fc.constantFrom(c, ...(table.get(c) ?? []))))
    .map((picked) => picked.join(""));
}

const hex = (n: number) => n.toString(16).toUpperCase().padStart(2, "0");
/** Ways an upstream that decodes a second time (leniently) reads an ASCII character. */
const ENCODINGS: ReadonlyArray<(code: number) => string> = [
  (c) => `%${hex(c)}`, // plain double encoding
  (c) => `%${hex(0xc0 | (c >> 6))}%${hex(0x80 | (c & 0x3f))}`, // overlong, 2 bytes
  (c) => `%E0%${hex(0x80 | (c >> 6))}%${hex(0x80 | (c & 0x3f))}`, // overlong, 3 bytes
  (c) => `%F0%80%${hex(0x80 | (c >> 6))}%${hex(0x80 | (c & 0x3f))}`, // overlong, 4 bytes
  (c) => `%u00${hex(c)}`, // IIS %u
];

/** `v` up to the first `separator` (all of it when there is none). */
const cut = (v: string, separator: string) => (v.includes(separator) ? v.slice(0, v.indexOf(separator)) : v);

const suffixOf = (chars: string, min: number, max: number) =>
  fc.array(fc.constantFrom(...chars), { minLength: min, maxLength: max }).map((a) => a.join(""));

const NORMALIZATIONS: readonly Normalization[] = [
  {
    name: "default-ignorable code points removed",
    spell: (s) =>
      fc
        .array(fc.tuple(fc.nat({ max: [...s].length }), fc.constantFrom(...IGNORABLES)), {
          minLength: 1,
          maxLength: 4,
        })
        .map((inserts) => {
          const chars = [...s];
          for (const [at, c] of inserts.sort((a, b) => b[0] - a[0])) chars.splice(at, 0, c);
          return chars.join("");
        }),
    apply: (v) => v.replace(/\p{Default_Ignorable_Code_Point}/gu, ""),
  },
  {
    name: "Unicode compatibility forms (NFKC)",
    spell: (s) => substitute(s, compatForms),
    apply: (v) => v.normalize("NFKC"),
  },
  { name: "case folding (per character, Java/.NET)", spell: (s) => substitute(s, caseForms) },
  {
    name: "trailing dots, spaces and tildes stripped",
    spell: (s) => suffixOf(". ~", 1, 4).map((tail) => s + tail),
    apply: (v) => v.replace(/[. ~]+$/, ""),
  },
  {
    name: "NTFS alternate data stream (`::$DATA`)",
    spell: (s) => fc.constantFrom("::$DATA", ":$DATA", ":x", ":zone.identifier:$DATA").map((t) => s + t),
    apply: (v) => cut(v, ":"),
  },
  {
    name: "matrix parameters (`;…`)",
    spell: (s) => fc.constantFrom(";jsessionid=x", ";", ";a=b;c").map((t) => s + t),
    apply: (v) => cut(v, ";"),
  },
  {
    name: "extension suffixes (one or more)",
    spell: (s) =>
      fc
        .array(fc.stringMatching(/^[a-z0-9]{1,5}$/), { minLength: 1, maxLength: 3 })
        .map((exts) => `${s}.${exts.join(".")}`),
    apply: (v) => cut(v, "."),
  },
  {
    name: "8.3 short name (`ADMINI~1`)",
    spell: (s) =>
      fc
        .tuple(
          fc.integer({ min: 1, max: 6 }),
          fc.integer({ min: 1, max: 9 }),
          fc.constantFrom("", ".JSO", ".X"),
        )
        .map(([keep, n, ext]) => `${s.replace(/[ .]/g, "").toUpperCase().slice(0, keep)}~${n}${ext}`),
  },
  {
    name: "decoded once more, leniently (double encoding, overlong UTF-8, %u)",
    spell: (s) => {
      const chars = [...s];
      const ascii = chars.flatMap((c, i) => (c < "\u0080" ? [i] : []));
      if (ascii.length === 0) return fc.constant(s);
      return fc
        .tuple(fc.constantFrom(...ascii), fc.constantFrom(...ENCODINGS))
        .map(([at, encode]) => chars.map((c, i) => (i === at ? encode(c.charCodeAt(0)) : c)).join(""));
    },
  },
];

/* ---------- the world ---------- */

const siblingArb = fc.oneof(
  fc.constantFrom("admin", "me", "administrators", "export", "straße", "köln", "ǆungla", "v1"),
  fc.stringMatching(/^[a-z][a-z0-9_-]{0,11}$/),
);

interface World {
  readonly siblings: readonly { readonly method: HttpMethod; readonly literal: string }[];
}

const worldArb: fc.Arbitrary<World> = fc.record({
  siblings: fc.uniqueArray(
    fc.record({ method: fc.constantFrom<HttpMethod>("GET", "DELETE"), literal: siblingArb }),
    {
      minLength: 1,
      maxLength: 3,
      selector: (s) => s.literal,
    },
  ),
});

function build(world: World) {
  const allowed = snapshot("GET", TEMPLATE);
  const operations = [
    allowed,
    ...world.siblings.map((s) => snapshot(s.method, `/files/${encodePathSegment(s.literal)}`)),
  ];
  const catalog = capability(operations);
  const policy = policyV1([entry([["GET", TEMPLATE]], { operations: [allowed] })]);
  return { catalog, policy, allowed };
}

type Answer = "allowed" | string;

/** decide() on a concrete request path spelling `value` (ext_authz, proxy, invoke by path). */
function concrete(world: World, value: string): Answer {
  const { catalog, policy } = build(world);
  const decision = decide({
    subjectId: "agent-7",
    capabilityId: CAPABILITY_ID,
    capability: catalog,
    policy: { ok: true, document: policy },
    method: "GET",
    path: `/files/${encodePathSegment(value)}`,
    now: NOW,
  });
  return decision.status === "denied" ? decision.reason : "allowed";
}

/** The template named with `value` as its argument (invoke by permission id, broker, MCP). */
function template(world: World, value: string): Answer {
  const { catalog, policy, allowed } = build(world);
  const decision = decide({
    subjectId: "agent-7",
    capabilityId: CAPABILITY_ID,
    capability: catalog,
    policy: { ok: true, document: policy },
    method: "GET",
    path: TEMPLATE,
    pathIsTemplate: true,
    now: NOW,
  });
  if (decision.status === "denied") return decision.reason;
  try {
    renderUpstreamRequest(
      { capability: catalog, permissionId: pid("GET", TEMPLATE), operation: allowed },
      { path: { name: value } },
    );
    return "allowed";
  } catch (error) {
    assert.ok(error instanceof ExecutionError, String(error));
    return error.reason;
  }
}

const targeted = (world: World) =>
  fc
    .constantFrom(...world.siblings)
    .map((sibling) => ({ world, sibling: sibling.literal, method: sibling.method }));

describe("path values: what an upstream normalizes onto a literal sibling is never allowed", () => {
  for (const normalization of NORMALIZATIONS) {
    it(normalization.name, () => {
      fc.assert(
        fc.property(
          worldArb
            .chain(targeted)
            .chain(({ world, sibling, method }) =>
              normalization.spell(sibling).map((value) => ({ world, sibling, method, value })),
            ),
          ({ world, sibling, method, value }) => {
            const { apply } = normalization;
            if (apply !== undefined) assert.equal(apply(value), apply(sibling), "generator");
            // A GET sibling's own exact spelling reaches the sibling's operation (not allowed here).
            const expected =
              value === sibling && method === "GET" ? "operation_not_allowed" : "ambiguous_path";
            assert.equal(concrete(world, value), expected, `concrete path, value ${JSON.stringify(value)}`);
            assert.equal(
              template(world, value),
              "ambiguous_path",
              `template, value ${JSON.stringify(value)}`,
            );
          },
        ),
        { numRuns: NUM_RUNS },
      );
    });
  }

  it("several normalizations composed (characters, then a suffix, then an encoding)", () => {
    const [ignorable, compat, caseFold, trailing, stream, , extension, , decoding] = NORMALIZATIONS;
    assert.ok(ignorable && compat && caseFold && trailing && stream && extension && decoding);
    fc.assert(
      fc.property(
        worldArb.chain(targeted).chain(({ world, sibling }) =>
          fc
            .constantFrom(caseFold, compat, ignorable)
            .chain((chars) => chars.spell(sibling))
            .chain((spelled) =>
              fc.constantFrom(trailing, stream, extension).chain((suffix) => suffix.spell(spelled)),
            )
            .chain((suffixed) => fc.oneof(fc.constant(suffixed), decoding.spell(suffixed)))
            .map((value) => ({ world, value })),
        ),
        ({ world, value }) => {
          assert.equal(concrete(world, value), "ambiguous_path", `concrete path, ${JSON.stringify(value)}`);
          assert.equal(template(world, value), "ambiguous_path", `template, ${JSON.stringify(value)}`);
        },
      ),
      { numRuns: NUM_RUNS },
    );
  });

  it("the issue's spellings, by name", () => {
    const world: World = {
      siblings: [
        { method: "GET", literal: "admin" },
        { method: "DELETE", literal: "administrators" },
      ],
    };
    for (const value of [
      "admin\u200B",
      "ad\u00ADmin",
      "\uFEFFadmin",
      "admin\u2060",
      "admin::$DATA",
      "admin~",
      "ADMIN~1",
      "ADMINI~1",
      "ADMINI~1.JSO",
      "admin.json.bak",
      "admin.",
      "admin ",
      "ａｄｍｉｎ",
      "ADMIN",
      "adm\u0130n", // İ: Java's equalsIgnoreCase equates it with "i"
      "%C1%A1dmin", // overlong "a"
      "%u0061dmin",
      "%AAdmin", // "ª" read as Latin-1: NFKC "a"
      "admin;jsessionid=x",
    ]) {
      assert.equal(concrete(world, value), "ambiguous_path", `concrete ${JSON.stringify(value)}`);
      assert.equal(template(world, value), "ambiguous_path", `template ${JSON.stringify(value)}`);
    }
  });
});

describe("path values: values no normalization maps onto a sibling are unaffected", () => {
  // Siblings spelled with a–m only; values that start with anything else (and carry no "%",
  // no separator, no default-ignorable code point) cannot reduce to one of them.
  const quietSiblingArb = fc.uniqueArray(
    fc.record({
      method: fc.constantFrom<HttpMethod>("GET", "DELETE"),
      literal: fc.stringMatching(/^[a-m]{1,10}$/),
    }),
    { minLength: 1, maxLength: 3, selector: (s) => s.literal },
  );
  const ordinaryArb = fc
    .tuple(
      fc.constantFrom(..."nopqrstuvwxyzNOPQRSTUVWXYZ0123456789", "é", "日", "ж", "Ω", "ñ"),
      fc.array(fc.constantFrom(..."abcdefghijklmnopqrstuvwxyz0123456789._~:- ", "é", "ß", "日"), {
        maxLength: 16,
      }),
    )
    .map(([first, rest]) => first + rest.join(""));

  it("ordinary values beside siblings they cannot reduce to are allowed on both forms", () => {
    fc.assert(
      fc.property(quietSiblingArb, ordinaryArb, (siblings, value) => {
        const world = { siblings };
        assert.equal(concrete(world, value), "allowed", `concrete ${JSON.stringify(value)}`);
        assert.equal(template(world, value), "allowed", `template ${JSON.stringify(value)}`);
      }),
      { numRuns: NUM_RUNS },
    );
  });

  it("near misses of a sibling (a letter, digit, '-' or '_' more) are allowed", () => {
    fc.assert(
      fc.property(
        worldArb.chain(targeted),
        fc.stringMatching(/^[a-z0-9_-]{1,6}$/),
        ({ world, sibling }, more) => {
          const value = sibling + more;
          fc.pre(!world.siblings.some((s) => s.literal.toLowerCase() === value.toLowerCase()));
          assert.equal(concrete(world, value), "allowed", `concrete ${JSON.stringify(value)}`);
          assert.equal(template(world, value), "allowed", `template ${JSON.stringify(value)}`);
        },
      ),
      { numRuns: NUM_RUNS },
    );
  });

  it("everyday values beside `admin` and `me`", () => {
    const world: World = {
      siblings: [
        { method: "GET", literal: "admin" },
        { method: "DELETE", literal: "me" },
      ],
    };
    for (const value of [
      "report.json",
      "report.json.bak",
      "john.doe",
      "José",
      "日本",
      "v1.2.3",
      "a b",
      "~tilde",
      "me-too",
      "administrator",
      "madmin",
      "100%",
      "straße",
      "x:y",
    ]) {
      assert.equal(concrete(world, value), "allowed", `concrete ${JSON.stringify(value)}`);
      assert.equal(template(world, value), "allowed", `template ${JSON.stringify(value)}`);
    }
  });
});
