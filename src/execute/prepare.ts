/**
 * The pipeline's "prepare the upstream request" stages, in their order, for every path that
 * renders an upstream request (invoke, broker, MCP through the executor; the sidecar's
 * forward proxy renders the same way): the path-value rule on the raw arguments → the
 * snapshot's input schema and routing overrides → the signed parameter constraints with the
 * rollout gate → the request rendered from the reviewed template and its method and path
 * matched again against the decision's catalog (it must map to the allowed permission).
 * Nothing here loads a secret or touches the network; every refusal is an ExecutionError with
 * the error table's code (ambiguous_path, invalid_input, constraint_violation, …).
 */

import { isMcpToolSnapshot } from "../core/operation-snapshot.ts";
import type { ConstraintRollout } from "../core/parameter-constraints.ts";
import { enforceOperationInput, type ValidatedArgs } from "./input.ts";
import {
  type AllowedRoute,
  assertUnambiguousPath,
  renderDownstreamToolRequest,
  renderUpstreamRequest,
} from "./url.ts";

export interface PreparedUpstreamRequest {
  /** The arguments as validated and constrained: the only ones that may be sent. */
  readonly args: ValidatedArgs;
  /** The upstream URL rendered from the reviewed template (path values and validated query). */
  readonly url: URL;
}

export function prepareUpstreamRequest(
  route: AllowedRoute,
  args: unknown,
  rollout: ConstraintRollout,
): PreparedUpstreamRequest {
  // A value that could select another operation gets the same reason whether it came in a
  // concrete path (decide()) or as an argument: checked before the schema reports anything else.
  assertUnambiguousPath(route, args);
  const validated = enforceOperationInput(route.operation, args, rollout);
  // A downstream MCP tool's endpoint is fixed by review; its arguments travel in tools/call.
  const url = isMcpToolSnapshot(route.operation)
    ? renderDownstreamToolRequest(route)
    : renderUpstreamRequest(route, validated);
  return { args: validated, url };
}
