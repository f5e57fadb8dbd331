import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Ajv2020 } from "ajv/dist/2020.js";
import fc from "fast-check";
import {
  compileLinearPattern,
  linearPatternProblem,
  linearRegExp,
  MAX_PATTERN_PROGRAM_SIZE,
  UnsupportedPatternError,
} from "../../src/core/linear-pattern.ts";

/** The fastest of a few runs, in milliseconds: noise only ever adds time. */
function fastest(run: () => void, rounds = 5): number {
  let best = Number.POSITIVE_INFINITY;
  for (let i = 0; i < rounds; i++) {
    const start = process.hrtime.bigint();
    run();
    best = Math.min(best, Number(process.hrtime.bigint() - start) / 1e6);
  }
  return best;
}

/**
 * The complexity guard: the work at 8n is at most 4 × 8 times the work at n (linear growth
 * with generous slack for a loaded machine, plus 3 ms for the timer's floor). A backtracking
 * engine on these inputs is exponential: it would not finish at n, let alone 8n.
 */
function assertGrowsLinearly(label: string, work: (n: number) => () => void, n: number): void {
  const small = fastest(work(n));
  const large = fastest(work(8 * n));
  assert.ok(
    large <= 32 * small + 3,
    `${label}: ${small.toFixed(2)} ms at n=${n}, ${large.toFixed(2)} ms at 8n`,
  );
}

/** Patterns that take a backtracking engine exponential time, with inputs that make it try. */
const CATASTROPHIC: readonly (readonly [string, (n: number) => string])[] = [
  ["^(a+)+$", (n) => `${"a".repeat(n)}!`],
  ["^(a|a)*$", (n) => `${"a".repeat(n)}!`],
  ["^(\\w+\\s?)*$", (n) => `${"ab ".repeat(n / 3)}!`],
  ["(a{1,10}){1,10}b", (n) => "a".repeat(n)],
  ["^(([a-z])+.)+[A-Z]([a-z])+$", (n) => `${"a".repeat(n)}!`],
  ["^(a|aa)+$", (n) => `${"a".repeat(n)}b`],
  ["^(.*a){12}$", (n) => "a".repeat(n)],
  // Hostile to the DFA instead (2^20 states): it must start over or fall back, not grow.
  ["^(?:.*a.{20})$", (n) => "ab".repeat(n / 2)],
];

describe("linear-time patterns: the complexity guard", () => {
  for (const [pattern, input] of CATASTROPHIC) {
    it(`${pattern} grows linearly with the input`, () => {
      const compiled = compileLinearPattern(pattern);
      assertGrowsLinearly(pattern, (n) => () => compiled.test(input(n)), 6000);
    });
  }

  it("the guard itself catches quadratic growth", () => {
    const quadratic = (n: number) => () => {
      let sum = 0;
      for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) sum += i ^ j;
      assert.ok(sum >= 0);
    };
    assert.throws(() => assertGrowsLinearly("quadratic", quadratic, 1000), assert.AssertionError);
  });
});

/** Small ECMAScript patterns built from the constructs the translation rewrites. */
const atom = fc.constantFrom(
  "a",
  "b",
  "-",
  " ",
  "\\.",
  "\\/",
  ".",
  "\\d",
  "\\D",
  "\\w",
  "\\W",
  "\\s",
  "\\S",
  "\\u00e9",
  "\\u{1F600}",
  "\\uD83D\\uDE00",
  "\\x41",
  "\\t",
  "\\n",
  "\\0",
  "\\cJ",
  "[ab]",
  "[^ab]",
  "[a-c]",
  "[\\s-]",
  "[^\\S]",
  "[\\S\\d]",
  "[\\b]",
  "[\\-a]",
  "[]",
  "[^]",
  "[.]",
  "[[]",
  "\\p{Lu}",
  "\\P{L}",
  "\\p{gc=Ll}",
  "\\p{Script=Latin}",
);
const quantifier = fc.constantFrom("", "", "*", "+", "?", "{2}", "{0,2}", "{1,}", "*?", "+?");
const pattern: fc.Arbitrary<string> = fc.letrec<{ term: string; seq: string; alt: string }>((tie) => ({
  term: fc.oneof(
    { depthSize: "small" },
    { weight: 4, arbitrary: fc.tuple(atom, quantifier).map(([a, q]) => a + q) },
    {
      weight: 1,
      arbitrary: fc
        .tuple(fc.constantFrom("(", "(?:", "(?<g>"), tie("alt"), quantifier)
        .map(([open, inner, q]) => `${open.replace("<g>", `<g${inner.length}>`)}${inner})${q}`),
    },
    { weight: 1, arbitrary: fc.constantFrom("^", "$", "\\b", "\\B") },
  ),
  seq: fc.array(tie("term"), { minLength: 1, maxLength: 4 }).map((terms) => terms.join("")),
  alt: fc.array(tie("seq"), { minLength: 1, maxLength: 3 }).map((seqs) => seqs.join("|")),
})).alt;
const text = fc
  .array(
    fc.constantFrom(
      "a",
      "b",
      "c",
      "A",
      "-",
      " ",
      "\u00a0",
      "\u2028",
      "\n",
      "\r",
      "\t",
      "1",
      "_",
      "é",
      "😀",
      "/",
      ".",
      "\u0000",
    ),
    { maxLength: 8 },
  )
  .map((chars) => chars.join(""));

describe("linear-time patterns mean what ECMAScript means", () => {
  it("agrees with the ECMAScript engine (u flag) on random patterns and inputs", () => {
    fc.assert(
      fc.property(pattern, fc.array(text, { minLength: 1, maxLength: 6 }), (source, inputs) => {
        let native: RegExp;
        try {
          native = new RegExp(source, "u");
        } catch {
          return; // Not ECMAScript (a generated group name repeated): refused, checked below.
        }
        const linear = compileLinearPattern(source);
        for (const input of inputs) {
          // V8 also tries \B between the two halves of a surrogate pair; the specification
          // (AdvanceStringIndex steps over the pair) and RE2 do not.
          if (source.includes("\\B") && /[\u{10000}-\u{10FFFF}]/u.test(input)) continue;
          assert.equal(
            linear.test(input),
            native.test(input),
            `${JSON.stringify(source)} on ${JSON.stringify(input)}`,
          );
        }
      }),
      { numRuns: 1000 },
    );
  });

  it("spells out what RE2 reads differently: \\s, \\S, ., [], [^] and \\u escapes", () => {
    const cases: readonly (readonly [string, string, boolean])[] = [
      ["^\\S+$", "a\u00a0b", false],
      ["^\\S+$", "a\u2028b", false],
      ["^\\s$", "\u3000", true],
      ["^\\s$", "\ufeff", true],
      ["^.$", "\r", false],
      ["^.$", "\u2029", false],
      ["^.$", "😀", true],
      ["^[]$", "", false],
      ["^[^]$", "\n", true],
      ["^\\uD83D\\uDE00$", "😀", true],
      ["^[\\b]$", "\b", true],
    ];
    for (const [source, input, expected] of cases) {
      assert.equal(
        compileLinearPattern(source).test(input),
        expected,
        `${source} on ${JSON.stringify(input)}`,
      );
      assert.equal(new RegExp(source, "u").test(input), expected, `ECMAScript: ${source}`);
    }
  });
});

describe("patterns linear time cannot run are refused with a reason", () => {
  const refused: readonly (readonly [string, RegExp])[] = [
    ["(a)\\1", /backreferences \(\\1\) are not supported/],
    ["(?<x>a)\\k<x>", /backreferences \(\\k<name>\)/],
    ["(?=a)a", /lookahead/],
    ["(?!a)b", /lookahead/],
    ["(?<=a)b", /lookbehind/],
    ["(?<!a)b", /lookbehind/],
    ["(?i:a)", /inline modifiers/],
    ["[", /not a valid ECMAScript regular expression/],
    ["a{2,1}", /not a valid ECMAScript regular expression/],
    ["\\p{Letter}", /the linear-time engine cannot compile it/],
    ["a{1001}", /repeat count is above 1000/],
    ["(a{100}){100}", /repeat count is above 1000/],
    ["^[a-z]{1,600}$", new RegExp(`above the limit of ${MAX_PATTERN_PROGRAM_SIZE}`)],
  ];
  for (const [source, reason] of refused) {
    it(source, () => {
      assert.match(linearPatternProblem(source) ?? "(accepted)", reason);
      assert.throws(() => compileLinearPattern(source), UnsupportedPatternError);
    });
  }

  it("accepts the usual ones", () => {
    for (const source of [
      "^[A-Za-z0-9._-]{1,255}$",
      "^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}(?:\\.\\d{1,9})?Z$",
      "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
      "^(?<year>\\d{4})-(?<month>0[1-9]|1[0-2])$",
      "^[^@\\s]+@[^@\\s]+\\.[a-z]{2,}$",
      "^\\p{L}[\\p{L}\\p{N} '-]*$",
    ]) {
      assert.equal(linearPatternProblem(source), undefined, source);
    }
  });
});

describe("linearRegExp inside ajv (code.regExp)", () => {
  const ajv = new Ajv2020({ code: { regExp: linearRegExp }, allErrors: true });

  it("runs every pattern of a schema, each its own (ajv keys them by toString)", () => {
    const validate = ajv.compile({
      type: "object",
      properties: { a: { type: "string", pattern: "^a+$" }, b: { type: "string", pattern: "^b+$" } },
      patternProperties: { "^x_": { type: "integer" } },
    });
    assert.equal(validate({ a: "aaa", b: "bb", x_1: 1 }), true);
    assert.equal(validate({ a: "aaa", b: "aa" }), false);
    assert.equal(validate({ a: "bb", b: "bb" }), false);
    assert.equal(validate({ x_1: "one" }), false);
  });

  it("a hostile pattern and input validate in linear time", () => {
    const validate = ajv.compile({ type: "string", pattern: "^(a+)+$" });
    assertGrowsLinearly("ajv", (n) => () => validate(`${"a".repeat(n)}!`), 6000);
  });

  it("refuses to compile a schema whose pattern linear time cannot run", () => {
    assert.throws(() => ajv.compile({ type: "string", pattern: "^(a)\\1$" }), UnsupportedPatternError);
  });
});
