import { AuthorityError } from "../errors.ts";

/** The longest a policy may last, assigned by an admin or through a binding. */
export const MAX_POLICY_TTL_SECONDS = 366 * 24 * 3600;

/** How an assignment says when its policy expires: exactly one of the two. */
export interface AssignmentExpiryInput {
  /** ISO 8601. */
  readonly expires_at?: string;
  readonly ttl_seconds?: number;
}

/** The expiry an assignment asks for: in the future and at most MAX_POLICY_TTL_SECONDS away. */
export function assignmentExpiry(input: AssignmentExpiryInput, now: Date): Date {
  if ((input.expires_at === undefined) === (input.ttl_seconds === undefined)) {
    throw new AuthorityError("invalid_request", "Give exactly one of expires_at and ttl_seconds.");
  }
  const at =
    input.ttl_seconds !== undefined
      ? new Date(now.getTime() + input.ttl_seconds * 1000)
      : new Date(Date.parse(input.expires_at ?? ""));
  if (Number.isNaN(at.getTime())) {
    throw new AuthorityError("invalid_request", "expires_at must be an ISO 8601 timestamp.");
  }
  if (at.getTime() <= now.getTime()) {
    throw new AuthorityError("invalid_request", "The policy must expire in the future.");
  }
  if (at.getTime() - now.getTime() > MAX_POLICY_TTL_SECONDS * 1000) {
    throw new AuthorityError(
      "invalid_request",
      `A policy may last at most ${MAX_POLICY_TTL_SECONDS} seconds.`,
    );
  }
  return at;
}
