import { AuthorityError } from "../errors.ts";

/**
 * Who is calling, as established from a verified bearer token.
 *
 * Roles (token claim `roles`):
 * - `admin`: platform administrator — every admin route, every partner.
 * - `partner_admin`: manages its own partner (claim `partner_id`): users, APIs, policies,
 *   boundaries, auth profiles, bindings; reads its own audit and usage.
 * - `auditor`: read-only — audit, MCP audit, usage, diagnostics, policy records.
 * Any other authenticated principal (agents, users) may only use the runtime paths.
 */
export const roles = ["admin", "partner_admin", "auditor"] as const;
export type Role = (typeof roles)[number];

export interface Principal {
  readonly subject: string;
  readonly roles: readonly string[];
  readonly scopes: readonly string[];
  readonly partnerId: string | undefined;
  readonly clientId: string | undefined;
  /** May stand for platform_vouched subjects (its issuer's setting; src/core/subject-identity.ts). */
  readonly vouchable: boolean;
  /** The token's verified `aud` values, where the route needs them (/mcp: was it issued for the MCP resource?). */
  readonly audience?: readonly string[];
  /** When the verified token expires (an exchanged token is never kept longer). */
  readonly expiresAt?: Date;
}

export function hasRole(principal: Principal, role: Role): boolean {
  return principal.roles.includes(role);
}

/** Platform admins, and partner admins of this very partner, may manage it. */
export function assertCanManagePartner(principal: Principal, partnerId: string): void {
  if (hasRole(principal, "admin")) return;
  if (hasRole(principal, "partner_admin") && principal.partnerId === partnerId) return;
  throw new AuthorityError("insufficient_role", "This principal may not manage this partner.");
}

export function assertCanReadPartner(principal: Principal, partnerId: string): void {
  if (hasRole(principal, "auditor")) return;
  assertCanManagePartner(principal, partnerId);
}

export function assertRole(principal: Principal, ...allowed: Role[]): void {
  if (allowed.some((role) => hasRole(principal, role))) return;
  throw new AuthorityError("insufficient_role", `This route needs one of the roles: ${allowed.join(", ")}.`);
}
