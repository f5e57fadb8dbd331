import type { PlatformEndpoints } from "../../admin/platform-diagnostics.ts";
import type { SecretKeys } from "../../admin/secret-box.ts";
import type { EgressPolicy } from "../../execute/egress.ts";
import type { JwksStatus } from "../../identity/jwt-verifier.ts";
import type { McpConfig } from "../../mcp/config.ts";
import type { Logger } from "../../observability/logger.ts";
import type { SidecarLeases } from "../../policy/change-log.ts";
import type { PolicyProtector } from "../../policy/protector.ts";
import type { Store } from "../../store/store.ts";

/** Verifies a bearer token; the identity module's JwtVerifier satisfies it. */
export interface BearerVerifier {
  verify(token: string): Promise<{
    readonly subject: string;
    readonly roles: readonly string[];
    readonly scopes: readonly string[];
    readonly clientId?: string | undefined;
    /** The partner claim, read strictly (VerifiedToken.partnerId): never read from `claims`. */
    readonly partnerId?: string | undefined;
    readonly claims: Readonly<Record<string, unknown>>;
    /** Absent: the token's issuer is the primary one (may stand for platform_vouched subjects). */
    readonly vouchable?: boolean | undefined;
  }>;
  /** The state of the verifier's key set (diagnostics), where the verifier exposes it. */
  jwksStatus?(): JwksStatus;
}

export interface AuthorityServiceConfig {
  /** Public base URL, used in MCP resource metadata and links. */
  readonly publicUrl: string;
  /** The issuer of bearer tokens this service accepts. */
  readonly issuer: string;
  readonly audience: string;
  /** Largest request body accepted (413 above). */
  readonly bodyLimitBytes: number;
  /** Name of this environment's service identity (platform_service_v2 policies). */
  readonly serviceIdentity: string;
  /** Parameter-constraint rollout: env flag + partners allowed to use it. */
  readonly parameterScoping: { readonly enabled: boolean; readonly partnerAllowlist: readonly string[] };
  /** Hosted MCP settings (origins, upstream timeout); defaults apply when absent. */
  readonly mcp?: McpConfig;
  /** Who holds the keys (diagnostics shows it; the embedded mode is flagged). */
  readonly policyProtection: { readonly mode: "crypto" | "managed" | "embedded" };
}

/** Everything a route of the authority service needs, built once at start. */
export interface AuthorityContext {
  readonly config: AuthorityServiceConfig;
  readonly store: Store;
  readonly verifier: BearerVerifier;
  /**
   * The verifier of /mcp: the configured audiences and also the MCP resource URL (RFC 8707,
   * tokens a client asked for the resource itself); absent: `verifier`. Only /mcp uses it,
   * so a token minted for the MCP resource opens nothing else.
   */
  readonly mcpVerifier?: BearerVerifier;
  readonly protector: PolicyProtector;
  readonly logger: Logger;
  readonly now: () => Date;
  /**
   * Key rings that seal auth-profile secrets at rest (one ring per partner, owner
   * `auth-profile-secrets:<partner_id>`). Without it, auth profiles cannot be stored or
   * resolved (503); everything else works.
   */
  readonly secretKeyRings?: SecretKeys;
  /**
   * Called after every stored policy change with the subject and its new head, so caches
   * (sidecars over Redis pub/sub) can drop stale copies. A failure is logged, never undone.
   */
  readonly onPolicyChange?: (subjectId: string, head: number) => void | Promise<void>;
  /** The sidecars' freshness leases over the policy change log (src/policy/change-log.ts). */
  readonly sidecarLeases?: SidecarLeases;
  /** Where upstream calls and imported server URLs may point (docs/security.md, "Egress"). */
  readonly egress: EgressPolicy;
  /** Platform services this process knows of (GET /admin/diagnostics probes them). */
  readonly platform?: PlatformEndpoints;
}
