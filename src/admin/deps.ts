import type { AdminChain } from "../audit/admin-chain.ts";
import type { EgressPolicy } from "../execute/egress.ts";
import type { Logger } from "../observability/logger.ts";
import type { SidecarLeases } from "../policy/change-log.ts";
import type { KeyRingSource } from "../policy/local-protector.ts";
import type { PolicyProtector } from "../policy/protector.ts";
import type { Store } from "../store/store.ts";
import type { SecretKeys } from "./secret-box.ts";

/**
 * What the admin domain services need. The authority service's context satisfies it
 * structurally, so routes pass their context straight through.
 */
export interface AdminDeps {
  readonly store: Store;
  readonly now: () => Date;
  readonly protector: PolicyProtector;
  readonly logger?: Logger;
  /** Seals auth-profile secrets; absent: profiles with secrets cannot be stored or resolved. */
  readonly secretKeyRings?: SecretKeys;
  /** Told after every stored policy change. */
  readonly onPolicyChange?: (subjectId: string, head: number) => void | Promise<void>;
  /**
   * The sidecars' freshness leases: a change that takes access away answers only once every
   * sidecar holding one acknowledged it or its lease ran out. Absent: nothing waits (the
   * change is still logged for sidecars).
   */
  readonly sidecarLeases?: SidecarLeases;
  /** Checks imported upstream URLs and partner JWKS URLs. */
  readonly egress: EgressPolicy;
  /** Chains policy and binding changes (audit/admin-chain.ts); absent: they are appended unchained. */
  readonly adminChain?: AdminChain;
}

/** Who made an admin change, for audit records. */
export interface Actor {
  /** Subject of the caller's verified bearer token. */
  readonly subject: string;
  readonly requestId: string;
}

export type { KeyRingSource };
