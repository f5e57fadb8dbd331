/**
 * One copy of each policy entry and operation snapshot in a sidecar, however many subjects
 * hold it. Subjects assigned the same capability carry identical `apis` entries (the same
 * reviewed snapshots, usually the same allowlist): parsed per policy they were copied per
 * subject — 1.2 MB of heap for a 500-operation entry, times every subject. Here each verified
 * document's entries, and their snapshots, are replaced by the one instance already held
 * for the same content, found by the SHA-256 of its JSON text (equal text is equal content;
 * a content that merely looks alike is another key). Shared instances are deep-frozen: no
 * holder can change what another subject's decision reads. They are held weakly: an
 * instance lives while some cached policy (or a decision in flight) uses it.
 *
 * Interning runs only on documents that were verified (signature, hash binding, schema): it
 * never makes an unverified value reachable, it only swaps a verified value for an equal one.
 * That is also why `knownEntry` may spare a new document the validation of an entry: a held
 * entry passed it, and an entry of the same content would pass it again (the signature of the
 * new document is still verified, and the rules across its entries still checked).
 *
 * A whole `apis` section is held too, by the SHA-256 of the exact bytes it was parsed from
 * (parsePolicyDocument's `apisHash`: the text up to the section's end, whose first 8 bytes
 * are always `{"apis":`), never by anything a document says about itself: a
 * later document whose section has those bytes takes the shared array (`knownApis`) without
 * parsing, validating or hashing its entries — subjects assigned the same capabilities carry
 * byte-identical sections. With the section its bytes are kept (one copy per section) and
 * SHA-256 run over them (`heldApis`): a later document that starts with exactly those bytes —
 * compared byte for byte, found by their length and last bytes — takes the section without
 * those bytes being hashed again; the text's hash continues from the held state over the rest.
 * The same bytes with SHA-512 run over them (made once a second text seems to start with them)
 * spare the signature's payload digest those bytes too (`heldPrefix`; src/crypto compares them).
 *
 * `heapBytes` estimates the V8 heap a JSON value occupies (64-bit, no pointer compression, as
 * Node ships): objects and arrays with their backing stores, strings with their characters,
 * doubles boxed; property names are internalized (shared) and not counted. The cache's byte
 * bound uses it; test/policy/cache/policy-interning.test.ts checks it against measured heap.
 */
import { createHash, type Hash } from "node:crypto";
import {
  type ApisSectionBytes,
  type HeldApis,
  type KnownApis,
  POLICY_SCHEMA_V2,
  type PolicyApiEntry,
  type PolicyDocument,
  type Sha256Ref,
} from "../../core/index.ts";
import type { OperationSnapshot } from "../../core/operation-snapshot.ts";
import { PayloadPrefix } from "../../crypto/index.ts";
import type { Weight } from "./admission-cache.ts";

const OBJECT_HEADER = 24;
const ARRAY_HEADER = 32 + 16;
const SLOT = 8;
const STRING_HEADER = 16;
const HEAP_NUMBER = 16;
/** Dictionary-mode objects (many properties, e.g. response_redactions) cost more per slot. */
const DICTIONARY_SLOT = 24;
const FAST_PROPERTIES = 128;

const align = (bytes: number): number => Math.ceil(bytes / 8) * 8;

function stringBytes(text: string): number {
  // Latin-1 strings take a byte per character, others two.
  // biome-ignore lint/suspicious/noControlCharactersInRegex: the class is every non-Latin-1 character
  const wide = /[^\u0000-\u00ff]/.test(text);
  return align(STRING_HEADER + (wide ? 2 : 1) * text.length);
}

/** Estimated heap bytes of a JSON value (see the module comment). */
export function heapBytes(value: unknown): number {
  if (typeof value === "string") return stringBytes(value);
  if (typeof value === "number")
    return Number.isInteger(value) && Math.abs(value) < 2 ** 31 ? 0 : HEAP_NUMBER;
  if (typeof value !== "object" || value === null) return 0;
  if (Array.isArray(value)) {
    let total = ARRAY_HEADER + SLOT * value.length;
    for (const item of value) total += heapBytes(item);
    return total;
  }
  const keys = Object.keys(value);
  let total = OBJECT_HEADER + (keys.length > FAST_PROPERTIES ? DICTIONARY_SLOT : SLOT) * keys.length;
  for (const key of keys) total += heapBytes((value as Record<string, unknown>)[key]);
  return total;
}

function deepFreeze<T>(value: T): T {
  if (typeof value === "object" && value !== null && !Object.isFrozen(value)) {
    for (const key of Object.keys(value)) deepFreeze((value as Record<string, unknown>)[key]);
    Object.freeze(value);
  }
  return value;
}

interface Shared<T> {
  readonly value: T;
  readonly key: string;
  readonly bytes: number;
}

/** A weak table of shared instances by content hash: an instance lives while something holds it. */
function createTable<T extends object>(prefix: string) {
  const table = new Map<string, { readonly ref: WeakRef<T>; readonly bytes: number }>();
  const cleanup = new FinalizationRegistry<string>((key) => {
    if (table.get(key)?.ref.deref() === undefined) table.delete(key);
  });
  /** Keys already computed, by object (a shared instance's own, or a value just looked up). */
  const keys = new WeakMap<object, string>();
  const keyOf = (value: object): string => {
    let key = keys.get(value);
    if (key === undefined) {
      key = `${prefix}:${createHash("sha256").update(JSON.stringify(value)).digest("base64")}`;
      keys.set(value, key);
    }
    return key;
  };
  const held = (key: string) => {
    const known = table.get(key);
    const value = known?.ref.deref();
    return known === undefined || value === undefined ? undefined : { value, bytes: known.bytes };
  };
  return {
    /** The shared instance of the same content as `value`, if one is held. */
    find(value: unknown): T | undefined {
      return typeof value === "object" && value !== null ? held(keyOf(value))?.value : undefined;
    },
    intern(value: T, build: (value: T) => T): Shared<T> {
      const key = keyOf(value);
      const known = held(key);
      if (known !== undefined) return { ...known, key };
      const own = deepFreeze(build(value));
      const bytes = heapBytes(own);
      table.set(key, { ref: new WeakRef(own), bytes });
      keys.set(own, key);
      cleanup.register(own, key);
      return { value: own, key, bytes };
    },
    get size() {
      return table.size;
    },
  };
}

export interface InternedDocument {
  readonly document: PolicyDocument;
  /** What the document's holder alone weighs, and the shared entries it uses. */
  readonly weight: Weight;
}

export interface PolicyInterner {
  /**
   * `apisHash`: parsePolicyDocument's key of the exact bytes `document.apis` was parsed from,
   * alone; the section is then held under it. Only for a verified document.
   */
  intern(document: PolicyDocument, apisHash?: Sha256Ref, bytes?: ApisSectionBytes): InternedDocument;
  /** The held section filed under `hash` (the bytes a verified document's section had), if any. */
  knownApis(hash: Sha256Ref): KnownApis | undefined;
  /** The held section whose bytes (kept when it was filed) are exactly `bytes`, if any. */
  heldApis(bytes: Uint8Array): HeldApis | undefined;
  /**
   * The kept bytes of the held section a signed payload seems to start with, and SHA-512 run
   * over them (verifySignedBlob's `heldPrefix`; it compares them with the payload), if any.
   */
  heldPrefix(payload: Uint8Array): PayloadPrefix | undefined;
  /** The held entry of the same content as `entry` (one a verified document had), if any. */
  knownEntry(entry: unknown): PolicyApiEntry | undefined;
  /** Shared instances alive now (entries and snapshots). */
  readonly size: number;
}

interface Section {
  /** The entries' keys and weights (Weight.shared), one array for every holder. */
  readonly shared: Weight["shared"];
  /** hashCanonical of the section, once a v2 document carrying it had it checked. */
  policyHash?: Sha256Ref;
  /** A copy of the bytes it was parsed from, and SHA-256 run over them (never digested). */
  readonly bytes?: { readonly copy: Buffer; readonly sha256: Hash; sha512?: PayloadPrefix };
}

/** Where held bytes are looked for: their length and last 64 bytes (a match is then compared whole). */
function bytesKey(bytes: Uint8Array): string {
  const view = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return `${view.length}:${view.toString("latin1", Math.max(0, view.length - 64))}`;
}

export function createPolicyInterner(): PolicyInterner {
  const snapshots = createTable<OperationSnapshot>("op");
  const entries = createTable<PolicyApiEntry>("entry");
  // An interned entry holds its snapshots strongly: they live as long as some entry uses them.
  const internEntry = (entry: PolicyApiEntry): Shared<PolicyApiEntry> =>
    entries.intern(entry, (fresh) => ({
      ...fresh,
      operations: fresh.operations.map((operation) => snapshots.intern(operation, (op) => op).value),
    }));

  /** Sections by the hash of their bytes, held weakly (a document holding the array keeps it). */
  const sectionsByHash = new Map<Sha256Ref, WeakRef<readonly PolicyApiEntry[]>>();
  /** The same sections by bytesKey of the bytes they hold (one per key: another is found by its hash). */
  const sectionsByBytes = new Map<string, WeakRef<readonly PolicyApiEntry[]>>();
  const sections = new WeakMap<readonly PolicyApiEntry[], Section>();
  const sectionCleanup = new FinalizationRegistry<{ hash: Sha256Ref; bytesKey?: string }>((filed) => {
    if (sectionsByHash.get(filed.hash)?.deref() === undefined) sectionsByHash.delete(filed.hash);
    if (filed.bytesKey !== undefined && sectionsByBytes.get(filed.bytesKey)?.deref() === undefined)
      sectionsByBytes.delete(filed.bytesKey);
  });
  /** The document's section: the held one it already is, or its entries interned (and filed under `apisHash`). */
  const sectionOf = (
    document: PolicyDocument,
    apisHash: Sha256Ref | undefined,
    bytes: ApisSectionBytes | undefined,
  ) => {
    const held = sections.get(document.apis);
    if (held !== undefined) return { apis: document.apis, section: held };
    const interned = document.apis.map(internEntry);
    const apis = Object.freeze(interned.map((entry) => entry.value));
    const shared = interned.map(({ key, bytes }) => ({ key, bytes }));
    if (apisHash === undefined || sectionsByHash.get(apisHash)?.deref() !== undefined)
      return { apis, section: { shared } };
    const key = bytes === undefined ? undefined : bytesKey(bytes.bytes);
    // The kept bytes weigh in the cache's bound like the entries: once while any policy holds the section.
    const section: Section =
      bytes === undefined
        ? { shared }
        : {
            shared: [...shared, { key: `apis-bytes:${apisHash}`, bytes: bytes.bytes.byteLength }],
            bytes: { copy: Buffer.from(bytes.bytes), sha256: bytes.sha256 },
          };
    sections.set(apis, section);
    sectionsByHash.set(apisHash, new WeakRef(apis));
    if (key !== undefined && sectionsByBytes.get(key)?.deref() === undefined)
      sectionsByBytes.set(key, new WeakRef(apis));
    sectionCleanup.register(apis, key === undefined ? { hash: apisHash } : { hash: apisHash, bytesKey: key });
    return { apis, section };
  };

  return {
    intern(document, apisHash, bytes) {
      const { apis, section } = sectionOf(document, apisHash, bytes);
      // A v2 document was validated against its policy_hash: the section's canonical hash.
      if (document.schema_version === POLICY_SCHEMA_V2) section.policyHash ??= document.policy_hash;
      const shell = { ...document, apis } as PolicyDocument;
      // The shell's own weight: everything but the shared entries (counted once by the cache).
      const ownBytes = heapBytes({ ...shell, apis: [] }) + SLOT * apis.length;
      // An entry's snapshots are part of its weight (heapBytes of the frozen entry counts them).
      return { document: Object.freeze(shell), weight: { ownBytes, shared: section.shared } };
    },
    knownApis(hash) {
      const apis = sectionsByHash.get(hash)?.deref();
      const section = apis === undefined ? undefined : sections.get(apis);
      if (apis === undefined || section === undefined) return undefined;
      return section.policyHash === undefined ? { apis } : { apis, policyHash: section.policyHash };
    },
    heldApis(bytes) {
      const apis = sectionsByBytes.get(bytesKey(bytes))?.deref();
      const section = apis === undefined ? undefined : sections.get(apis);
      if (apis === undefined || section?.bytes === undefined || !section.bytes.copy.equals(bytes))
        return undefined;
      const { sha256 } = section.bytes;
      return section.policyHash === undefined
        ? { apis, sha256 }
        : { apis, policyHash: section.policyHash, sha256 };
    },
    heldPrefix(payload) {
      const view = Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength);
      // Where a policy text's section ends (parsePolicyDocument's split); only a candidate.
      const end = view.lastIndexOf('],"') + 1;
      if (end === 0) return undefined;
      const apis = sectionsByBytes.get(bytesKey(view.subarray(0, end)))?.deref();
      const held = apis === undefined ? undefined : sections.get(apis)?.bytes;
      if (held === undefined) return undefined;
      // Hashed once, when a second text first seems to start with the section: never for one alone.
      held.sha512 ??= PayloadPrefix.of(held.copy);
      return held.sha512;
    },
    knownEntry: (entry) => entries.find(entry),
    get size() {
      return snapshots.size + entries.size;
    },
  };
}
