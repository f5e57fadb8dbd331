/**
 * No module under src/ keeps a process-wide service. Every service (decision runtime,
 * binding runtime, token caches, executors, clients, pools) is built by a process's
 * composition root and passed to what uses it; a module-level registry of services (the
 * `WeakMap` keyed by an app that built a default runtime on first use) would give two
 * authorities in one process shared state, and a test no way to replace it.
 *
 * The scan reads every top-level declaration of src/**\/*.ts and flags: a module-level
 * `let`/`var`; a module-level `new Map/WeakMap/Set/WeakSet/LRUCache` (except a constant
 * table: a ReadonlySet/ReadonlyMap, or an UPPER_CASE set/map given its entries); a
 * module-level `new …Cache/Pool/Registry/Client/Executor/…` or `create…Cache(…)`-like
 * call. What remains is allow-listed below with the reason it is not a service: pure memo
 * caches of values derived from their key, per-thread state, and in-process locks.
 */
import assert from "node:assert/strict";
import { readdir, readFile } from "node:fs/promises";
import { join, relative } from "node:path";
import { describe, it } from "node:test";

interface ModuleState {
  readonly file: string;
  readonly name: string;
  readonly line: number;
  readonly kind: "mutable binding" | "collection" | "service";
}

const COLLECTIONS = /^new\s+(?:Map|WeakMap|Set|WeakSet|LRUCache)\b/;
const SERVICE_NAMES =
  "Cache|Caches|Pool|Registry|Client|Executor|Runtime|Recorder|Tokens|Loader|Resolver|Store";
const SERVICES = new RegExp(`^(?:new\\s+\\w*(?:${SERVICE_NAMES})\\b|create\\w*(?:${SERVICE_NAMES})\\s*\\()`);
const DECLARATION =
  /^(?:export\s+)?(const|let|var)\s+([A-Za-z_$][\w$]*)\s*(?::\s*([^=]+?))?\s*(?:=\s*(.*))?$/;

function bracketDepth(text: string): number {
  let depth = 0;
  for (const char of text) {
    if (char === "(" || char === "[" || char === "{") depth++;
    else if (char === ")" || char === "]" || char === "}") depth--;
  }
  return depth;
}

/** The module-level state declarations of one source file (top-level statements only). */
export function moduleLevelState(source: string, file: string): ModuleState[] {
  const lines = source.split("\n");
  const found: ModuleState[] = [];
  for (let index = 0; index < lines.length; index++) {
    const match = DECLARATION.exec(lines[index] ?? "");
    if (match === null) continue;
    const [, keyword = "", name = "", annotation = "", first = ""] = match;
    // The initializer may span lines (a type argument list, an options object).
    let initializer = first;
    let end = index;
    while (bracketDepth(initializer) > 0 && end + 1 < lines.length) {
      end++;
      initializer += `\n${lines[end]}`;
    }
    const trimmed = initializer.trim();
    if (keyword !== "const") {
      found.push({ file, name, line: index + 1, kind: "mutable binding" });
    } else if (COLLECTIONS.test(trimmed)) {
      const readonlyView = /^Readonly(?:Set|Map)\b/.test(annotation.trim());
      const constantTable =
        /^[A-Z][A-Z0-9_]*$/.test(name) && /^new\s+(?:Set|Map)\s*(?:<[^>]*>)?\(\[/.test(trimmed);
      if (!readonlyView && !constantTable) found.push({ file, name, line: index + 1, kind: "collection" });
    } else if (SERVICES.test(trimmed)) {
      found.push({ file, name, line: index + 1, kind: "service" });
    }
    index = end;
  }
  return found;
}

/** `file:name` → why it is not a process-wide service. Stale entries fail the test too. */
const ALLOWED: Readonly<Record<string, string>> = {
  "src/admin/key-lock.ts:tails":
    "in-process write lock per store key: serializing a subject's read-modify-write must hold for every route of the process",
  "src/crypto/worker-pool-thread.ts:waiting":
    "state of one worker thread (the module is the thread's entry point)",
  "src/crypto/kem.ts:inputsCache":
    "pure memo, bounded: HPKE key-schedule inputs derived from the key id alone",
  "src/execute/input.ts:bySchemaObject": "pure memo: compiled input validator per schema object (weak)",
  "src/execute/input.ts:byHash": "pure memo, bounded: compiled input validator per schema hash",
  "src/execute/url.ts:templates": "pure memo: parsed upstream URL template per template string",
  "src/pipeline/check-record.ts:lastIsoMs": "pure memo: the ISO string of the last millisecond formatted",
  "src/pipeline/check-record.ts:lastIso": "pure memo: the ISO string of the last millisecond formatted",
  "src/pipeline/request-arguments.ts:declaredByOperation":
    "pure memo: declared header names per schema object (weak)",
  "src/pipeline/request-arguments.ts:needsBodyByOperation":
    "pure memo: whether a schema reads the body (weak)",
  "src/servers/sidecar/request-guard.ts:report":
    "where the process guard logs: uncaughtException is process-wide, so its one handler is too (set by installProcessGuard)",
  "src/servers/sidecar/warm-decision.ts:fullCollection":
    "not a service: V8's `gc`, taken off the global by the blob's main before other code runs, dropped after its one use",
  "src/servers/sidecar/grpc/proto.ts:loaded": "pure memo: the parsed constant .proto definitions",
  "src/identity/secret-hash.ts:dummyHash": "pure memo: one dummy hash of a constant input, for equal timing",
  "src/core/schema-validator.ts:shared": "schema compiler shared by pure validators (compiled code only)",
  "src/core/path-template.ts:validityMemo": "pure memo: validity per template string",
  "src/core/parameter-constraints.ts:preparedByArray":
    "pure memo: prepared signed constraints per verified constraints array (weak)",
  "src/servers/sidecar/grpc/check-response-wire.ts:buffer":
    "scratch buffer of one synchronous encode: nothing of a response survives the call, only its capacity",
  "src/servers/sidecar/grpc/check-response-wire.ts:position":
    "write position in that scratch buffer, reset at the start of every encode",
  "src/core/capability.ts:operationIds": "pure memo: permission ids per capability object (weak)",
  "src/core/capability.ts:matchers": "pure memo: path matcher per capability object (weak)",
  "src/core/path-values.ts:guards": "pure memo: route guards per capability object (weak)",
  "src/core/path-values.ts:checks": "pure memo: value check per schema object (weak)",
  "src/core/linear-pattern.ts:compiled": "pure memo, bounded: compiled linear-time pattern per source",
  "src/core/redaction.ts:sensitiveKeyAnswers": "pure memo, bounded: whether a key name is sensitive",
};

async function sourceFiles(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true, recursive: true });
  return entries
    .filter((entry) => entry.isFile() && entry.name.endsWith(".ts"))
    .map((entry) => join(entry.parentPath, entry.name));
}

const root = join(import.meta.dirname, "..", "..");

describe("no process-wide mutable service in src/", () => {
  it("flags module-level registries, lazy singletons and services; ignores constants and locals", () => {
    const source = [
      "const runtimes = new WeakMap<object, DecisionRuntime>();",
      "export const tokenCaches = new WeakMap<",
      "  AuthorityContext,",
      "  ClientCredentialsTokens",
      ">();",
      "let pool: WorkerPool | undefined;",
      "const shared = createClientCredentialsTokens({",
      "  fetch,",
      "});",
      "const executor = createExecutor({ secretResolver });",
      "const cache = new LRUCache<string, string>({ max: 10 });",
      'const HEADERS = new Set(["a", "b"]);',
      'const codes: ReadonlyMap<number, string> = new Map([[1, "a"]]);',
      "const LIMIT = 10;",
      "function build() {",
      "  const local = new Map<string, string>();",
      "  let count = 0;",
      "}",
    ].join("\n");
    assert.deepEqual(
      moduleLevelState(source, "x.ts").map(({ name, kind }) => `${name}:${kind}`),
      [
        "runtimes:collection",
        "tokenCaches:collection",
        "pool:mutable binding",
        "shared:service",
        "executor:service",
        "cache:collection",
      ],
    );
  });

  it("src/ keeps none beyond the allow-listed memo caches, each with its reason", async () => {
    const found: ModuleState[] = [];
    for (const path of await sourceFiles(join(root, "src"))) {
      found.push(...moduleLevelState(await readFile(path, "utf8"), relative(root, path)));
    }
    const unexpected = found
      .filter((state) => ALLOWED[`${state.file}:${state.name}`] === undefined)
      .map((state) => `${state.file}:${state.line} ${state.name} (${state.kind})`);
    assert.deepEqual(
      unexpected,
      [],
      "module-level state: build it in the process's composition root and pass it in, or allow-list a pure memo with its reason",
    );
    const present = new Set(found.map((state) => `${state.file}:${state.name}`));
    const stale = Object.keys(ALLOWED).filter((key) => !present.has(key));
    assert.deepEqual(stale, [], "allow-list entries that no longer exist");
  });
});
