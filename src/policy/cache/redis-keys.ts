/**
 * Redis names shared by the authority service (which publishes policy changes) and every
 * sidecar (which reads heads and caches verified policies). Change them only together.
 */

/** Pub/sub channel: one message `{"subject_id": "...", "head": N}` per policy write or revocation. */
export const POLICY_CHANGES_CHANNEL = "authority:policy-changes";

/** The current head (an increasing integer) of a subject's policy record; `0` = no policy. */
export function policyHeadKey(subjectId: string): string {
  return `authority:policy-head:${subjectId}`;
}

/** A sealed (encrypted + MAC'd) verified policy, written by a sidecar. */
export function policyEntryKey(subjectId: string): string {
  return `authority:sidecar:policy:${subjectId}`;
}

/** The name a sealed policy entry authenticates (bound into its MAC). */
export function policyEntryName(subjectId: string): string {
  return `policy:${subjectId}`;
}

export interface PolicyChangeMessage {
  readonly subject_id: string;
  readonly head: number;
}

export function isPolicyHead(value: unknown): value is number {
  return typeof value === "number" && Number.isSafeInteger(value) && value >= 0;
}

/** Parses a change message; anything malformed is ignored (undefined), never half-used. */
export function parsePolicyChange(text: string): PolicyChangeMessage | undefined {
  if (text.length > 4096) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof value !== "object" || value === null) return undefined;
  const { subject_id: subjectId, head } = value as Record<string, unknown>;
  if (typeof subjectId !== "string" || subjectId.length === 0 || subjectId.length > 512) return undefined;
  if (!isPolicyHead(head)) return undefined;
  return { subject_id: subjectId, head };
}

/**
 * Raises a head key to ARGV[1] unless it already holds that or more (heads never go back),
 * then, with ARGV[2] (channel) and ARGV[3] (message) given, publishes the change — always
 * (the authority service: a retried change is announced again), or with ARGV[4] =
 * "if-raised" only when the head went up (a sidecar that learned a newer head from the
 * authority tells the others). A value that is not a number is overwritten: it was not
 * written by us.
 */
export const RAISE_HEAD_SCRIPT = `
local current = tonumber(redis.call('GET', KEYS[1]))
local head = tonumber(ARGV[1])
local raised = 0
if current == nil or current < head then
  redis.call('SET', KEYS[1], ARGV[1])
  raised = 1
end
if ARGV[2] and (raised == 1 or ARGV[4] ~= 'if-raised') then
  redis.call('PUBLISH', ARGV[2], ARGV[3])
end
return raised
`;

/** Parses a stored head; a malformed value is treated as unknown. */
export function parseHead(value: string | null): number | null {
  if (value === null || !/^(?:0|[1-9][0-9]{0,15})$/.test(value)) return null;
  const head = Number(value);
  return Number.isSafeInteger(head) ? head : null;
}
