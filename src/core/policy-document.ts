import { createHash, type Hash } from "node:crypto";
import { canonicalJson, hashCanonical, type Sha256Ref, sha256Hex } from "./canonical-json.ts";
import { CoreError } from "./core-error.ts";
import { type OperationSnapshot, operationSnapshotProblems } from "./operation-snapshot.ts";
import { buildPermissionId, type PermissionId, parsePermissionId } from "./permission-id.ts";
import type { RedactionRule } from "./redaction.ts";
import { compileSchema, type SchemaCheck } from "./schema-validator.ts";
import {
  CRYPTO_VERSION_V2,
  POLICY_SCHEMA_V1,
  POLICY_SCHEMA_V2,
  policyDocumentV1Schema,
  policyDocumentV2Schema,
} from "./schemas/policy.schema.ts";

export {
  CRYPTO_VERSION_V2,
  POLICY_SCHEMA_V1,
  POLICY_SCHEMA_V2,
  policyDocumentV1Schema,
  policyDocumentV2Schema,
};

export interface PolicySubject {
  readonly subject_id: string;
  /** "agent" is the spec's value; "user" and "external" are the others this system writes. */
  readonly subject_type: string;
  readonly display_name: string;
}

/** One assigned capability inside a policy. */
export interface PolicyApiEntry {
  readonly capability_id: string;
  readonly allowed_permission_ids: readonly PermissionId[];
  readonly auth_profile_ref: string;
  /** Snapshots reviewed at assignment time. */
  readonly operations: readonly OperationSnapshot[];
  /** Permission id → rules. */
  readonly response_redactions: Readonly<Record<string, readonly RedactionRule[]>>;
}

export interface PolicyDocumentV1 {
  readonly schema_version: typeof POLICY_SCHEMA_V1;
  readonly policy_version: string;
  readonly subject: PolicySubject;
  readonly expires_at: string;
  readonly revoked_at: string | null;
  readonly apis: readonly PolicyApiEntry[];
}

export interface PolicyDocumentV2 {
  readonly schema_version: typeof POLICY_SCHEMA_V2;
  readonly crypto_version: typeof CRYPTO_VERSION_V2;
  readonly subject_id: string;
  readonly authority_partner_id: string;
  readonly binding_id: string;
  readonly issuer_hash: Sha256Ref;
  readonly external_subject_hash: Sha256Ref;
  readonly mapping_version: string;
  readonly policy_version: string;
  /** hashCanonical(apis). */
  readonly policy_hash: Sha256Ref;
  readonly expires_at: string;
  readonly revoked_at: string | null;
  /** Same object as v1; subject.subject_id equals subject_id. */
  readonly subject: PolicySubject;
  readonly apis: readonly PolicyApiEntry[];
}

export type PolicyDocument = PolicyDocumentV1 | PolicyDocumentV2;

export type PolicyState = "active" | "expired" | "revoked";

export class PolicyDocumentError extends CoreError<"policy_schema_invalid"> {
  /** Safe to return and log: locations and rules, never values. */
  readonly messages: readonly string[];

  constructor(messages: readonly string[]) {
    super("policy_schema_invalid", `policy document is invalid: ${messages.join("; ")}`);
    this.messages = messages;
  }
}

const checkV1 = compileSchema<PolicyDocumentV1>(policyDocumentV1Schema);
const checkV2 = compileSchema<PolicyDocumentV2>(policyDocumentV2Schema);

/** The v2 policy_hash: the canonical hash of the apis array. */
export function computePolicyHash(apis: readonly PolicyApiEntry[]): Sha256Ref {
  return hashCanonical(apis);
}

function permissionIdOf(capabilityId: string, snapshot: OperationSnapshot): string | undefined {
  try {
    return buildPermissionId(capabilityId, snapshot.method, snapshot.path);
  } catch {
    return undefined;
  }
}

/** Cross-field rules the schema cannot express; an entry in `known` was checked before (only the rules across entries apply). */
function entryProblems(
  entries: readonly PolicyApiEntry[],
  known: ReadonlySet<PolicyApiEntry> = new Set(),
): string[] {
  const problems: string[] = [];
  const capabilities = new Set<string>();
  entries.forEach((entry, i) => {
    const where = `/apis/${i}`;
    if (capabilities.has(entry.capability_id)) problems.push(`${where}/capability_id appears in two entries`);
    capabilities.add(entry.capability_id);
    if (known.has(entry)) return;
    const ownId = (id: string, at: string): void => {
      try {
        if (parsePermissionId(id).capabilityId !== entry.capability_id) {
          problems.push(`${at} names another capability`);
        }
      } catch {
        problems.push(`${at} is not a valid permission id`);
      }
    };
    entry.allowed_permission_ids.forEach((id, j) => {
      ownId(id, `${where}/allowed_permission_ids/${j}`);
    });
    for (const id of Object.keys(entry.response_redactions)) ownId(id, `${where}/response_redactions`);
    const seen = new Set<string>();
    entry.operations.forEach((snapshot, j) => {
      const at = `${where}/operations/${j}`;
      problems.push(...operationSnapshotProblems(snapshot, at));
      const id = permissionIdOf(entry.capability_id, snapshot);
      if (id !== undefined && seen.has(id)) problems.push(`${at} repeats an operation`);
      if (id !== undefined) seen.add(id);
    });
  });
  return problems;
}

/**
 * An `apis` section a verified document had, validated as a whole (its entries and the rules
 * across them), found again by the SHA-256 of its exact bytes.
 */
export interface KnownApis {
  readonly apis: readonly PolicyApiEntry[];
  /** hashCanonical(apis) when known (a v2 document carrying this section had it checked). */
  readonly policyHash?: Sha256Ref;
}

/**
 * A section held with the exact bytes it was parsed from (the text from its start to the end of
 * the section) and SHA-256 run over them: a text that starts with those bytes is hashed from there.
 */
export interface HeldApis extends KnownApis {
  /** The state after the section's bytes, never digested (continued on a copy). */
  readonly sha256: Hash;
}

/** Where a parsed section came from, for a holder to keep: the bytes, and SHA-256 run over them. */
export interface ApisSectionBytes {
  /** A view of the text from its start to the end of the section. */
  readonly bytes: Uint8Array;
  /** The state after `bytes`, never digested. */
  readonly sha256: Hash;
}

export interface PolicyValidationOptions {
  /**
   * An entry that passed this validation before (in an earlier document) and has the same
   * content as `entry`, or undefined. It takes the entry's place without its schema and its
   * own cross-field rules being checked again; the rules across entries still are.
   */
  readonly knownEntry?: (entry: unknown) => PolicyApiEntry | undefined;
  /**
   * parsePolicyDocument only: the section held for `hash` — the SHA-256 of a document's exact
   * bytes from its start to the end of its `apis` value — or undefined. A document with those
   * bytes takes the section without parsing or validating it again.
   */
  readonly knownApis?: (hash: Sha256Ref) => KnownApis | undefined;
  /**
   * parsePolicyDocument only: the section held for exactly these bytes (a document's, from its
   * start to the end of its `apis` value; the holder compares them byte for byte), or undefined.
   * Asked first: a section found so is neither hashed, parsed nor validated again.
   */
  readonly heldApis?: (bytes: Uint8Array) => HeldApis | undefined;
}

/** The schema's bound on `apis`: past it the whole document is checked, and refused. */
const MAX_APIS = 1024;

/**
 * The held entry for an unvalidated `entry`, or undefined; a lookup that cannot take it (nested
 * past a recursive walk's stack) leaves it to the schema, which refuses it as JSON.parse +
 * validation would.
 */
function lookUp(knownEntry: NonNullable<PolicyValidationOptions["knownEntry"]>, entry: unknown) {
  try {
    return knownEntry(entry);
  } catch {
    return undefined;
  }
}

/**
 * The document with its known entries set aside: what the schema still has to check (the
 * others), and how to put the known ones back in their places.
 */
function setAsideKnown(doc: Record<string, unknown>, knownEntry: PolicyValidationOptions["knownEntry"]) {
  const apis = doc.apis;
  if (knownEntry === undefined || !Array.isArray(apis) || apis.length > MAX_APIS) return undefined;
  const found = apis.map((entry) => lookUp(knownEntry, entry));
  if (found.every((entry) => entry === undefined)) return undefined;
  const shell = { ...doc, apis: apis.filter((_, i) => found[i] === undefined) };
  const merge = (checked: readonly PolicyApiEntry[]): PolicyApiEntry[] => {
    let next = 0;
    return found.map((entry) => entry ?? (checked[next++] as PolicyApiEntry));
  };
  return { shell, merge, known: new Set(found.filter((entry) => entry !== undefined)) };
}

/** The schema check, with known entries (or a known section, in place as `doc.apis`) taken as already checked. */
function checkWithKnown<T extends PolicyDocument>(
  check: SchemaCheck<T>,
  doc: Record<string, unknown>,
  options: PolicyValidationOptions,
  section: KnownApis | undefined,
): { readonly policy: T; readonly known: ReadonlySet<PolicyApiEntry> } {
  if (section !== undefined) {
    const result = check({ ...doc, apis: [] });
    if (!result.ok) throw new PolicyDocumentError(result.messages);
    return { policy: { ...result.value, apis: section.apis }, known: new Set(section.apis) };
  }
  const aside = setAsideKnown(doc, options.knownEntry);
  const result = check(aside?.shell ?? doc);
  if (!result.ok) throw new PolicyDocumentError(result.messages);
  if (aside === undefined) return { policy: result.value, known: new Set() };
  return { policy: { ...result.value, apis: aside.merge(result.value.apis) }, known: aside.known };
}

/**
 * Validates a decrypted, signature-verified policy against the schema of its
 * schema_version and the cross-field rules (docs/core.md). Throws PolicyDocumentError.
 */
export function validatePolicyDocument(doc: unknown, options: PolicyValidationOptions = {}): PolicyDocument {
  return validate(doc, options, undefined);
}

/** `section`: the known section that is `doc.apis` (parsePolicyDocument found it by its bytes). */
function validate(
  doc: unknown,
  options: PolicyValidationOptions,
  section: KnownApis | undefined,
): PolicyDocument {
  const record = typeof doc === "object" && doc !== null && !Array.isArray(doc) ? doc : undefined;
  const version = (record as Record<string, unknown> | undefined)?.schema_version;
  if (record !== undefined && version === POLICY_SCHEMA_V1) {
    const { policy, known } = checkWithKnown(checkV1, record as Record<string, unknown>, options, section);
    const problems = entryProblems(policy.apis, known);
    if (problems.length > 0) throw new PolicyDocumentError(problems);
    return policy;
  }
  if (record !== undefined && version === POLICY_SCHEMA_V2) {
    const { policy, known } = checkWithKnown(checkV2, record as Record<string, unknown>, options, section);
    const problems = entryProblems(policy.apis, known);
    if (policy.subject.subject_id !== policy.subject_id)
      problems.push("/subject/subject_id differs from /subject_id");
    if ((section?.policyHash ?? computePolicyHash(policy.apis)) !== policy.policy_hash)
      problems.push("/policy_hash does not match /apis");
    if (problems.length > 0) throw new PolicyDocumentError(problems);
    return policy;
  }
  throw new PolicyDocumentError([`/schema_version must be ${POLICY_SCHEMA_V1} or ${POLICY_SCHEMA_V2}`]);
}

/** A document's text as the authority signs it: canonical JSON, so `apis` (sorted first) opens it. */
const APIS_OPENING = '{"apis":';
const SECTION_START = Buffer.from(`${APIS_OPENING}[`);

/**
 * Where a canonical document's `apis` value ends (a byte offset), and the document without
 * it (its `apis` empty), parsed; undefined when the bytes are not in that shape. The split is
 * taken at the last `],"` (nothing after `apis` in either schema holds an array); a wrong
 * split fails the checks: the rest must be canonical JSON (each key once, so no second
 * `apis`), and the section one complete JSON value (the caller parses it, or finds its bytes
 * known). The split falls after an ASCII `]`, so decoding the two parts apart decodes the whole.
 */
function splitApisSection(bytes: Buffer): { readonly end: number; readonly rest: object } | undefined {
  // subarray, not compare(): compare throws a RangeError on a text shorter than the opening
  if (!bytes.subarray(0, SECTION_START.length).equals(SECTION_START)) return undefined;
  const end = bytes.lastIndexOf('],"') + 1;
  if (end <= APIS_OPENING.length) return undefined;
  const restText = `${APIS_OPENING}[]${bytes.toString("utf8", end)}`;
  try {
    const rest: unknown = JSON.parse(restText);
    if (typeof rest !== "object" || rest === null || Array.isArray(rest)) return undefined;
    if (canonicalJson(rest) !== restText) return undefined;
    return { end, rest };
  } catch {
    return undefined;
  }
}

export interface ParsedPolicyDocument {
  readonly document: PolicyDocument;
  /** `sha256:` of the exact text (its bytes as given, or a string's UTF-8): what a record's document_hash binds. */
  readonly textHash: Sha256Ref;
  /**
   * `sha256:` of the bytes up to the end of the `apis` value, when that value was parsed on
   * its own: what a holder may file `document.apis` under for knownApis.
   */
  readonly apisHash?: Sha256Ref;
  /** With `apisHash`: the bytes it is the hash of, and SHA-256 run over them (for `heldApis`). */
  readonly apisSection?: ApisSectionBytes;
}

const ref = (digest: string): Sha256Ref => `sha256:${digest}`;

/**
 * JSON.parse then validatePolicyDocument — the same document, or the same refusal. Given the
 * exact bytes of a canonical document (UTF-8), its `apis` section is parsed on its own, and
 * one whose bytes hash to a section `knownApis` holds (parsed alone and validated before) is
 * neither decoded, parsed nor validated again: bytes = opening + section + rest, the section
 * one complete value and the rest without `apis`, so parsing the whole gives the rest with
 * that section's value. The section's key and the text's hash are taken in one pass; a section
 * `heldApis` holds for the very bytes the text starts with is not hashed again either (SHA-256
 * continues from the state held after them, over the rest).
 */
export function parsePolicyDocument(
  text: string | Uint8Array,
  options: PolicyValidationOptions = {},
): ParsedPolicyDocument {
  if (typeof text === "string")
    return { document: validatePolicyDocument(JSON.parse(text), options), textHash: ref(sha256Hex(text)) };
  const bytes = Buffer.from(text.buffer, text.byteOffset, text.byteLength);
  const whole = () => validatePolicyDocument(JSON.parse(bytes.toString("utf8")), options);
  const split =
    options.knownApis === undefined && options.heldApis === undefined ? undefined : splitApisSection(bytes);
  if (split === undefined) return { document: whole(), textHash: ref(sha256Hex(bytes)) };
  const section = bytes.subarray(0, split.end);
  const rest = bytes.subarray(split.end);
  const held = options.heldApis?.(section);
  if (held !== undefined) {
    const textHash = ref(held.sha256.copy().update(rest).digest("hex"));
    return { document: validate({ ...split.rest, apis: held.apis }, options, held), textHash };
  }
  const hash = createHash("sha256").update(section);
  const sha256 = hash.copy();
  const apisHash = ref(hash.copy().digest("hex"));
  const textHash = ref(hash.update(rest).digest("hex"));
  const known = options.knownApis?.(apisHash);
  if (known !== undefined)
    return { document: validate({ ...split.rest, apis: known.apis }, options, known), textHash };
  let apis: unknown;
  try {
    apis = JSON.parse(bytes.toString("utf8", APIS_OPENING.length, split.end));
  } catch {
    // Not one value (a wrong split): the whole text decides, as without a known section.
    return { document: whole(), textHash };
  }
  const document = validatePolicyDocument({ ...split.rest, apis }, options);
  return { document, textHash, apisHash, apisSection: { bytes: section, sha256 } };
}

/**
 * The policy's state at `now`. Revoked wins over expired; a policy is expired only once
 * now is strictly after expires_at. An unreadable time fails closed (expired).
 */
export function policyState(doc: Pick<PolicyDocument, "expires_at" | "revoked_at">, now: Date): PolicyState {
  if (doc.revoked_at !== null) return "revoked";
  const expires = Date.parse(doc.expires_at);
  const at = now.getTime();
  if (Number.isNaN(expires) || Number.isNaN(at) || at > expires) return "expired";
  return "active";
}

/** The subject id a policy belongs to, for either version. */
export function policySubjectId(doc: PolicyDocument): string {
  return doc.schema_version === POLICY_SCHEMA_V2 ? doc.subject_id : doc.subject.subject_id;
}

/** The entry of a capability, if the policy assigns it. */
export function policyEntryFor(doc: PolicyDocument, capabilityId: string): PolicyApiEntry | undefined {
  return doc.apis.find((entry) => entry.capability_id === capabilityId);
}

/** The reviewed snapshot behind a permission id inside one entry. */
export function entrySnapshotFor(entry: PolicyApiEntry, permissionId: string): OperationSnapshot | undefined {
  return entry.operations.find((snapshot) => permissionIdOf(entry.capability_id, snapshot) === permissionId);
}
