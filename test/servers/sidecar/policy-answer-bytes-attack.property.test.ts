/**
 * Attack pass on decision 3131's policy answer read from its bytes (decision 3181): whatever
 * body the authority's address answers — the signed policy's key repeated, nested, escaped or
 * inside a string, its value broken by escapes, control or non-ASCII characters, surrogates or
 * invalid UTF-8 at any place (4-byte blocks' edges included), another subject's signed policy —
 * the sidecar's client reading the bytes must give what it gives reading `JSON.parse` of the
 * text, and the full verification of the record (signature, document hash, subject) the same
 * outcome.
 */
import assert from "node:assert/strict";
import { before, describe, it } from "node:test";
import fc from "fast-check";
import type { JsonAnswer, JsonFetch } from "../../../src/core/json-fetch.ts";
import { openPolicyDocument } from "../../../src/policy/artifact.ts";
import type { PolicyFetchResult } from "../../../src/policy/cache/index.ts";
import { createLocalPolicyProtector } from "../../../src/policy/local-protector.ts";
import { createProcessKeyRings } from "../../../src/policy/process-key-rings.ts";
import { createAuthorityClient } from "../../../src/servers/sidecar/authority-client.ts";
import { answerOf } from "../../../src/servers/sidecar/node-json-fetch.ts";
import { entry } from "../../core/fixtures.ts";
import { protectedRecord, recordSource, sidecarOpener } from "../../policy/cache/helpers.ts";

const protector = createLocalPolicyProtector({ keyRings: createProcessKeyRings(), serviceIdentity: "t" });
const opener = sidecarOpener(protector);

/** The client over a transport answering `body` (its bytes read whole, or JSON only). */
async function fetched(body: Buffer, withBytes: boolean): Promise<PolicyFetchResult | string> {
  const answer = answerOf(200, body);
  const fetch: JsonFetch = async () =>
    withBytes ? answer : ({ status: answer.status, json: answer.json } satisfies JsonAnswer);
  const client = createAuthorityClient({
    baseUrl: "http://authority.invalid",
    token: { token: async () => "t", invalidate: () => undefined },
    fetch,
  });
  try {
    return await client.fetchPolicy("s1", {});
  } catch (error) {
    return `refused: ${(error as Error).message}`;
  }
}

/** What the cache makes of a found record: the document it verifies, or why it refuses. */
async function verification(result: PolicyFetchResult | string): Promise<string> {
  if (typeof result === "string" || result.status !== "found") return JSON.stringify(result);
  if (result.signedPolicy === null) return "no signed policy";
  try {
    const opened = await openPolicyDocument(
      result.signedPolicy,
      opener,
      {
        cryptoVersion: result.record.crypto_version,
        subjectId: result.record.subject_id,
        partnerId: result.partnerId,
      },
      {},
    );
    if (opened.documentHash !== result.record.document_hash) return "document hash differs";
    return `verified ${opened.documentHash} ${opened.document.subject.subject_id}`;
  } catch (error) {
    return `unverifiable: ${(error as Error).message}`;
  }
}

/** The two results alike: the signed policy as bytes (decoded from the body) or as its base64. */
function comparable(result: PolicyFetchResult | string): unknown {
  if (typeof result === "string" || result.status !== "found") return result;
  const signed = result.signedPolicy;
  return {
    ...result,
    signedPolicy:
      typeof signed === "string"
        ? Buffer.from(signed, "base64").toString("hex")
        : signed === null
          ? null
          : Buffer.from(signed).toString("hex"),
  };
}

let verifiedSeen = 0;
async function assertSame(body: Buffer, label: string): Promise<void> {
  const bytes = await fetched(body, true);
  const text = await fetched(body, false);
  assert.deepEqual(comparable(bytes), comparable(text), label);
  const outcome = await verification(bytes);
  assert.equal(outcome, await verification(text), label);
  if (outcome.startsWith("verified")) verifiedSeen++;
}

describe("a policy answer read from its bytes decides as its JSON text does", () => {
  let own = "";
  let others = "";
  let facts: Record<string, unknown> = {};
  before(async () => {
    const source = recordSource(protector);
    source.records.set("s1", await protectedRecord(protector, "s1", 3));
    source.records.set("s2", await protectedRecord(protector, "s2", 3));
    const first = await source.fetchPolicy("s1", {});
    const second = await source.fetchPolicy("s2", {});
    assert.ok(first.status === "found" && typeof first.signedPolicy === "string");
    assert.ok(second.status === "found" && typeof second.signedPolicy === "string");
    own = first.signedPolicy;
    others = second.signedPolicy;
    facts = { ...first.record };
  });

  const bodyOf = (signed: string, extra = "") =>
    `{"policy":${JSON.stringify(facts)},"signed_policy":"${signed}"${extra},"subject":{"partner_id":"partner-1","identity":"platform_vouched"}}`;

  it("the genuine answer verifies both ways; another subject's signed policy is refused both ways", async () => {
    await assertSame(Buffer.from(bodyOf(own)), "own");
    assert.equal(verifiedSeen, 1);
    await assertSame(Buffer.from(bodyOf(others)), "another subject's");
    assert.equal(verifiedSeen, 1);
  });

  it("the key repeated, nested, escaped, spaced or inside a string", async () => {
    const policy = JSON.stringify(facts);
    const subject = '"subject":{"partner_id":"partner-1","identity":"platform_vouched"}';
    const bodies = [
      `{"policy":${policy},"signed_policy":"${others}","signed_policy":"${own}",${subject}}`,
      `{"policy":${policy},"signed_policy":"${own}","signed_policy":"${others}",${subject}}`,
      `{"policy":${policy},"signed_policy":"${own}","signed_policy":null,${subject}}`,
      `{"policy":${policy},"x":{"signed_policy":"${own}"},"signed_policy":"${others}",${subject}}`,
      `{"policy":${policy},"x":{"signed_policy":"${others}"},"signed_policy":"${own}",${subject}}`,
      `{"policy":${policy},"x":"\\"signed_policy\\":\\"${others}\\"","signed_policy":"${own}",${subject}}`,
      `{"policy":${policy},"signed\\u005fpolicy":"${others}","signed_policy":"${own}",${subject}}`,
      `{"policy":${policy},"signed_policy":"${own}","signed\\u005fpolicy":"${others}",${subject}}`,
      `{"policy":${policy},"signed_policy" :"${own}",${subject}}`,
      `{"policy":${policy},"signed_policy":"${own}" ,${subject}}`,
      `{"policy":${policy},"signed_policy":["${own}"],${subject}}`,
      `[{"policy":${policy},"signed_policy":"${own}",${subject}}]`,
      `{"policy":${policy},"signed_policy":"${own}",${subject}}}`,
      `{"policy":${policy},"signed_policy":"${own}",${subject}`,
      `{"policy":${policy},"signed_policy":"${own}"}`,
      `{"signed_policy":"${own}","policy":${policy},${subject},"signed_policy":"${own}"}`,
      `{"policy":${policy},"signed_policy":"",${subject}}`,
      `{"policy":${policy},"signed_policy":"${own}","signed_policy":"",${subject}}`,
    ];
    for (const [i, body] of bodies.entries()) await assertSame(Buffer.from(body), `body ${i}`);
  });

  it("the value broken at any place, 4-byte blocks' edges included (property)", async () => {
    const breaks = [
      "\\u0000",
      '\\"',
      "\\\\",
      "\\/",
      "\\n",
      "\\u0041",
      "\\ud800",
      "\\udc00",
      "\\ud83d\\ude00",
      "\u0000",
      "\u0001",
      "\u001f",
      "\u007f",
      "é",
      "𝄞",
      " ",
      "=",
      "==",
      "-",
      "_",
      "A",
      "AAAA",
    ];
    const rawBreaks = [
      [0xff],
      [0xc0, 0xaf],
      [0xe0, 0x80, 0xaf],
      [0xed, 0xa0, 0x80],
      [0xf8, 0x88, 0x80, 0x80, 0x80],
      [0x80],
    ];
    await fc.assert(
      fc.asyncProperty(
        fc.nat(),
        fc.integer({ min: -3, max: 3 }),
        fc.oneof(
          fc.constantFrom(...breaks).map((text) => Buffer.from(text)),
          fc.constantFrom(...rawBreaks).map((raw) => Buffer.from(raw)),
        ),
        fc.boolean(),
        fc.boolean(),
        async (at, shift, inserted, replace, theirs) => {
          const signed = theirs ? others : own;
          // Near a 4-byte block's edge, at the start, the end, or anywhere.
          const place = Math.max(
            0,
            Math.min(
              signed.length,
              (at % 5 === 0 ? 0 : at % 5 === 1 ? signed.length : (at % signed.length) & ~3) + shift,
            ),
          );
          const value = Buffer.concat([
            Buffer.from(signed.slice(0, place)),
            inserted,
            Buffer.from(signed.slice(replace ? place + inserted.length : place)),
          ]);
          const [head, tail] = bodyOf("\u0001").split("\u0001");
          await assertSame(
            Buffer.concat([Buffer.from(head ?? ""), value, Buffer.from(tail ?? "")]),
            `at ${place}`,
          );
        },
      ),
      { numRuns: 300 },
    );
  });

  it("split, truncated or padded oddly (property)", async () => {
    const body = Buffer.from(bodyOf(own));
    await fc.assert(
      fc.asyncProperty(fc.nat({ max: body.length }), fc.nat({ max: 8 }), async (cut, drop) => {
        await assertSame(
          Buffer.concat([body.subarray(0, cut), body.subarray(Math.min(body.length, cut + drop))]),
          `cut ${cut}+${drop}`,
        );
      }),
      { numRuns: 200 },
    );
  });

  it("a value over several 64 KiB decoding chunks, broken at and around their edges", async () => {
    const source = recordSource(protector);
    const apis = Array.from({ length: 400 }, (_, i) =>
      entry([["GET", `/items-${i}/{id}`]], { capabilityId: `api-${i}` }),
    );
    source.records.set("big", await protectedRecord(protector, "big", 2, { apis }));
    const found = await source.fetchPolicy("big", {});
    assert.ok(found.status === "found" && typeof found.signedPolicy === "string");
    const signed = found.signedPolicy;
    assert.ok(signed.length > 2 * 65_536 + 16, `${signed.length} characters`);
    const body = (value: string) =>
      Buffer.from(
        `{"policy":${JSON.stringify(found.record)},"signed_policy":"${value}","subject":{"partner_id":"partner-1","identity":"platform_vouched"}}`,
      );
    const before = verifiedSeen;
    await assertSame(body(signed), "the genuine large answer");
    assert.equal(verifiedSeen, before + 1);
    for (const edge of [65_536, 131_072]) {
      for (let shift = -5; shift <= 5; shift++) {
        const at = edge + shift;
        for (const inserted of ["=", "\\u0000", "\\\\", " ", "A", "-"]) {
          await assertSame(
            body(`${signed.slice(0, at)}${inserted}${signed.slice(at)}`),
            `${inserted} at ${at}`,
          );
          await assertSame(
            body(`${signed.slice(0, at)}${inserted}${signed.slice(at + inserted.length)}`),
            `${inserted} over ${at}`,
          );
        }
        await assertSame(body(`${signed.slice(0, at)}${signed.slice(at + 1)}`), `one removed at ${at}`);
      }
    }
  });
});
