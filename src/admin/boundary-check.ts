import type { BoundaryRecord } from "../store/model.ts";
import { permissionPatternMatches } from "./permission-pattern.ts";

export interface BoundaryRequest {
  readonly capabilityId: string;
  readonly permissionIds: readonly string[];
  /** Seconds from now until the assignment expires. */
  readonly ttlSeconds: number;
}

/** What lies outside a boundary; safe to return to the admin who asked. */
export interface BoundaryViolation {
  readonly reason: "boundary_violation";
  readonly boundary_id: string;
  /** The capability id (when not allowed) and every permission id no pattern matches. */
  readonly outside: readonly string[];
  /** Present when the requested lifetime is longer than the boundary allows. */
  readonly max_policy_ttl_seconds?: number;
  readonly requested_ttl_seconds?: number;
}

/** The violation of a boundary by one assignment, or undefined when it fits (pure). */
export function checkBoundary(
  boundary: BoundaryRecord,
  request: BoundaryRequest,
): BoundaryViolation | undefined {
  const outside: string[] = [];
  if (!boundary.allowed_capabilities.includes(request.capabilityId)) outside.push(request.capabilityId);
  for (const id of request.permissionIds) {
    if (!boundary.allowed_permission_patterns.some((pattern) => permissionPatternMatches(pattern, id))) {
      outside.push(id);
    }
  }
  const max = boundary.max_policy_ttl_seconds;
  const ttlExceeded = max !== null && request.ttlSeconds > max;
  if (outside.length === 0 && !ttlExceeded) return undefined;
  return {
    reason: "boundary_violation",
    boundary_id: boundary.boundary_id,
    outside,
    ...(ttlExceeded
      ? { max_policy_ttl_seconds: max, requested_ttl_seconds: Math.ceil(request.ttlSeconds) }
      : {}),
  };
}
