import assert from "node:assert/strict";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, test } from "node:test";
import fc from "fast-check";
import { denyReasons, errorCodes, GrpcCode, grpcCodeForStatus, isErrorCode } from "../../src/errors.ts";

/**
 * docs/errors.md against src/errors.ts, in both directions (as fastify checks its
 * docs/Reference/Errors.md against its error list), and every other page's status tables
 * against the same table.
 */

const repo = new URL("../../", import.meta.url).pathname;
const grpcNames = new Map<number, string>(Object.entries(GrpcCode).map(([name, code]) => [code, name]));

interface DocumentedCode {
  readonly code: string;
  readonly status: number;
  readonly grpc: number;
  readonly grpcName: string;
  readonly kind: string;
  readonly message: string;
}

function cells(line: string): string[] {
  return line
    .replace(/^\|/, "")
    .replace(/\|$/, "")
    .split("|")
    .map((cell) => cell.trim());
}

/** The rows of docs/errors.md's table: `| \`code\` | status | n \`NAME\` | kind | message |`. */
function documentedCodes(markdown: string): DocumentedCode[] {
  const rows: DocumentedCode[] = [];
  for (const line of markdown.split("\n")) {
    if (!line.startsWith("| `")) continue;
    const [code, status, grpc, kind, ...message] = cells(line);
    const codeMatch = /^`([a-z_]+)`$/.exec(code ?? "");
    const grpcMatch = /^(\d+) `([A-Z_]+)`$/.exec(grpc ?? "");
    assert.ok(codeMatch && grpcMatch && /^\d{3}$/.test(status ?? ""), `unreadable row: ${line}`);
    rows.push({
      code: codeMatch[1] as string,
      status: Number(status),
      grpc: Number(grpcMatch[1]),
      grpcName: grpcMatch[2] as string,
      kind: kind ?? "",
      message: message.join("|"),
    });
  }
  return rows;
}

/** `| 403 | \`code\`, \`other\` | …` rows of any page: a status, then the codes it answers with. */
function statusRows(markdown: string): { line: number; status: number; codes: string[] }[] {
  const rows: { line: number; status: number; codes: string[] }[] = [];
  markdown.split("\n").forEach((text, index) => {
    const [status, second] = cells(text);
    if (!text.startsWith("|") || !/^[1-5]\d\d$/.test(status ?? "") || second === undefined) return;
    const codes = [...second.matchAll(/`([a-z_]+)`/g)].map((match) => match[1] as string);
    if (codes.length > 0) rows.push({ line: index + 1, status: Number(status), codes });
  });
  return rows;
}

async function markdownPages(): Promise<string[]> {
  const docs = join(repo, "docs");
  const pages = [join(repo, "README.md")];
  for (const entry of await readdir(docs, { recursive: true, withFileTypes: true })) {
    if (entry.isFile() && entry.name.endsWith(".md")) pages.push(join(entry.parentPath, entry.name));
  }
  return pages;
}

describe("docs/errors.md is the error table", async () => {
  const documented = documentedCodes(await readFile(join(repo, "docs/errors.md"), "utf8"));
  const byCode = new Map(documented.map((row) => [row.code, row]));

  test("lists each code once", () => {
    assert.equal(byCode.size, documented.length, "a code is listed twice");
  });

  test("every code of src/errors.ts is documented", () => {
    const missing = Object.keys(errorCodes).filter((code) => !byCode.has(code));
    assert.deepEqual(missing, [], "codes of src/errors.ts missing from docs/errors.md");
  });

  test("every documented code is in src/errors.ts", () => {
    const unknown = documented.map((row) => row.code).filter((code) => !isErrorCode(code));
    assert.deepEqual(unknown, [], "docs/errors.md lists codes src/errors.ts does not have");
  });

  test("status, gRPC code, kind and message agree", () => {
    for (const row of documented) {
      if (!isErrorCode(row.code)) continue;
      const spec = errorCodes[row.code];
      assert.equal(row.status, spec.status, `${row.code}: HTTP status`);
      assert.equal(row.grpc, spec.grpc, `${row.code}: gRPC code`);
      assert.equal(row.grpcName, grpcNames.get(spec.grpc), `${row.code}: gRPC code name`);
      assert.equal(row.kind, Object.hasOwn(denyReasons, row.code) ? "deny reason" : "", `${row.code}: kind`);
      assert.equal(row.message, spec.message, `${row.code}: message`);
    }
  });
});

describe("every page's status tables agree with src/errors.ts", () => {
  test("a row that gives a status to a code of the table gives the table's status", async () => {
    const disagreements: string[] = [];
    let checked = 0;
    for (const page of await markdownPages()) {
      for (const row of statusRows(await readFile(page, "utf8"))) {
        for (const code of row.codes) {
          if (!isErrorCode(code)) continue; // a field name or a component's own reason
          checked++;
          const status = errorCodes[code].status;
          if (status !== row.status) {
            disagreements.push(
              `${page.slice(repo.length)}:${row.line}: ${code} ${row.status}, table ${status}`,
            );
          }
        }
      }
    }
    assert.deepEqual(disagreements, []);
    // The admin API, managed API and verify tables at least: a parser that reads nothing passes nothing.
    assert.ok(checked >= 30, `only ${checked} documented statuses were read`);
  });
});

describe("one HTTP status, one gRPC code", () => {
  test("the table never pairs one status with two gRPC codes", () => {
    const seen = new Map<number, number>();
    for (const [code, spec] of Object.entries(errorCodes)) {
      const earlier = seen.get(spec.status);
      assert.ok(earlier === undefined || earlier === spec.grpc, `${code}: ${spec.status} → ${spec.grpc}`);
      seen.set(spec.status, spec.grpc);
      assert.equal(grpcCodeForStatus(spec.status), spec.grpc, code);
    }
  });

  test("any other status gets a non-OK code: UNAVAILABLE for 5xx, PERMISSION_DENIED below", () => {
    fc.assert(
      fc.property(fc.integer({ min: 100, max: 599 }), (status) => {
        const code = grpcCodeForStatus(status);
        assert.notEqual(code, GrpcCode.OK);
        if (!Object.values(errorCodes).some((spec) => spec.status === status)) {
          assert.equal(code, status >= 500 ? GrpcCode.UNAVAILABLE : GrpcCode.PERMISSION_DENIED);
        }
      }),
    );
  });
});
