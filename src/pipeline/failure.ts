/**
 * The one mapping from a failure to what every path answers and records: the error table's
 * code and status (src/errors.ts). A refusal keeps its code (`invalid_input` 400,
 * `constraint_violation` 403, `ambiguous_path` 403, `egress_denied` 403, `redaction_failed`
 * 502…); an outage of anything the pipeline needs — store, policy keys, audit, the issuer's
 * keys, the sidecar's authority or Redis, the crypto service — is `upstream_unavailable` 503
 * (its module error names that code); any other fault is `internal` 500. Nothing is ever an allow.
 */
import {
  AuthorityError,
  type DenyExplanation,
  type ErrorCode,
  explainDeny,
  refinedDenyRules,
  toAuthorityError,
} from "../errors.ts";

/** The reason and status of a dependency outage, on every path. */
export const OUTAGE: ErrorCode = "upstream_unavailable";

export function pipelineFailure(error: unknown): AuthorityError {
  return toAuthorityError(error);
}

/** The outage failure, for the places that detect one without an error (audit buffer full, deadline). */
export function outageFailure(): AuthorityError {
  return new AuthorityError(OUTAGE);
}

/**
 * The rule of a refusal after the decision, from what the refusing step says of itself
 * (`details.reason`, `details.rule`): the rollout gate's second line names the decision's rule,
 * a signed constraint names its own; anything else is its code's rule.
 */
export function failureExplanation(error: AuthorityError): DenyExplanation {
  const details = error.details;
  if (details?.reason === "constraint_rollout_disabled")
    return explainDeny(error.code, { rule: refinedDenyRules.constraintsRollout });
  const rule = details?.rule;
  if (typeof rule === "string" && rule.startsWith(refinedDenyRules.constraint))
    return explainDeny(error.code, { rule });
  return explainDeny(error.code);
}
