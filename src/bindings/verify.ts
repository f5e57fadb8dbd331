/**
 * `POST /v1/authority/verify`: an upstream asks whether the request it received carries
 * a valid authority envelope for the arguments it received. Decision only — no
 * downstream call, and the answer never contains the envelope's contents, plaintext,
 * credentials or raw crypto errors: a stable code per cause (docs/bindings.md).
 */
import { LRUCache } from "lru-cache";
import type { AdminDeps } from "../admin/deps.ts";
import { scan } from "../admin/store-scan.ts";
import { buildPermissionId, type Sha256Ref } from "../core/index.ts";
import { type ErrorCode, errorCodes, type TableMapped } from "../errors.ts";
import type { CapabilityRecord } from "../store/model.ts";
import { collections } from "../store/model.ts";
import type { AuthenticatedWorkload } from "./authenticate.ts";
import {
  argumentsDigest,
  authorityProfiles,
  checkEnvelopeClaims,
  ProfileArgumentsError,
  parseEnvelopeClaims,
} from "./envelope.ts";
import { EnvelopeCryptoUnavailableError } from "./envelope-crypto.ts";
import type { BindingRuntime } from "./runtime.ts";

export interface VerifyRequest {
  readonly profile: string;
  readonly bindingId: string;
  readonly operationId: string;
  readonly arguments: unknown;
  readonly protectedEnvelope: string;
}

export interface VerifySuccess {
  readonly profile: string;
  readonly bindingId: string;
  readonly operationId: string;
  readonly decision: "allow";
  readonly verified: true;
}

/**
 * Every cause verify reports (spec: "Authority verify statuses"). Each is a code of the one
 * error table (src/errors.ts), which gives its status and message.
 */
export const verifyFailureCodes = [
  "unknown_profile",
  "unsupported_operation",
  "invalid_arguments",
  "binding_mismatch",
  "binding_inactive",
  "invalid_signature",
  "signer_mismatch",
  "invalid_envelope",
  "profile_mismatch",
  "issuer_mismatch",
  "audience_mismatch",
  "operation_mismatch",
  "permission_mismatch",
  "decision_denied",
  "lifetime_exceeded",
  "envelope_expired",
  "digest_mismatch",
  "crypto_unavailable",
  "operation_not_allowed",
] as const satisfies readonly ErrorCode[];

export type VerifyFailureCode = (typeof verifyFailureCodes)[number];

/** A refused verify: `code` and its table status go to the caller, nothing else. */
export class VerifyError extends Error implements TableMapped {
  readonly code: VerifyFailureCode;
  readonly status: number;

  constructor(code: VerifyFailureCode, options?: { cause?: unknown }) {
    super(errorCodes[code].message, options);
    this.name = "VerifyError";
    this.code = code;
    this.status = errorCodes[code].status;
  }

  /** Its table entry, for `toAuthorityError` (the one way onto the table). */
  get authorityCode(): VerifyFailureCode {
    return this.code;
  }

  toJSON(): { error: VerifyFailureCode; message: string } {
    return { error: this.code, message: this.message };
  }
}

export interface OperationIndex {
  /** Permission ids the operation id has in the partner's current catalogs (empty: unsupported). */
  permissionsOf(partnerId: string, operationId: string): Promise<ReadonlySet<string>>;
  /**
   * Whether the operation carries signed parameter constraints that the environment's
   * parameter-scoping rollout does not cover for this partner (scoping off, or the partner not
   * on its allowlist): invoke refuses such a call, so verify refuses its envelope too.
   */
  outsideRollout(partnerId: string, operationId: string): Promise<boolean>;
}

interface IndexedOperation {
  readonly permissionIds: Set<string>;
  constrained: boolean;
}

/**
 * Partner operation id → permission ids, built from the current catalogs and kept for a
 * short while; a miss rebuilds (at most once a second per partner) so a new import is
 * verifiable at once.
 */
export function createOperationIndex(
  runtime: Pick<BindingRuntime, "decisions">,
  deps: Pick<AdminDeps, "store"> & {
    readonly config: {
      readonly parameterScoping: { readonly enabled: boolean; readonly partnerAllowlist: readonly string[] };
    };
  },
  options: { readonly ttlMs?: number } = {},
): OperationIndex {
  const cache = new LRUCache<string, { builtAt: number; ops: Map<string, IndexedOperation> }>({
    max: 1000,
    ttl: options.ttlMs ?? 30_000,
  });
  const { enabled, partnerAllowlist } = deps.config.parameterScoping;
  const allowlist = new Set(partnerAllowlist);

  async function build(partnerId: string): Promise<Map<string, IndexedOperation>> {
    const ops = new Map<string, IndexedOperation>();
    for await (const item of scan<CapabilityRecord>(deps.store, collections.capabilities, `${partnerId}/`)) {
      const capability = await runtime.decisions.capabilities.resolve(partnerId, item.value.capability_id);
      if (capability === undefined) continue;
      for (const op of capability.operations) {
        const entry = ops.get(op.operation_id) ?? { permissionIds: new Set<string>(), constrained: false };
        entry.permissionIds.add(buildPermissionId(capability.capability_id, op.method, op.path));
        // Anything but an empty list counts as constrained (malformed metadata fails closed).
        const constraints: unknown = op.parameter_constraints;
        if (!(Array.isArray(constraints) && constraints.length === 0)) entry.constrained = true;
        ops.set(op.operation_id, entry);
      }
    }
    cache.set(partnerId, { builtAt: Date.now(), ops });
    return ops;
  }

  async function operation(partnerId: string, operationId: string): Promise<IndexedOperation | undefined> {
    const cached = cache.get(partnerId);
    const found = cached?.ops.get(operationId);
    if (found !== undefined) return found;
    if (cached !== undefined && Date.now() - cached.builtAt < 1000) return undefined;
    return (await build(partnerId)).get(operationId);
  }

  return {
    async permissionsOf(partnerId, operationId) {
      return (await operation(partnerId, operationId))?.permissionIds ?? new Set();
    },
    async outsideRollout(partnerId, operationId) {
      const found = await operation(partnerId, operationId);
      return found?.constrained === true && !(enabled && allowlist.has(partnerId));
    },
  };
}

/**
 * Checks, in order: profile known (400), arguments canonicalizable (400), binding equals
 * the workload client's and is active (403), operation supported (400), a constrained
 * operation inside the parameter-scoping rollout of the partner (403), envelope opens
 * and verifies (403; 503 when keys or the crypto service are unavailable), signer is the expected one
 * (403), then the profile checks on the signed claims (403 each).
 */
export async function verifyEnvelope(
  runtime: BindingRuntime,
  operations: OperationIndex,
  workload: Pick<AuthenticatedWorkload, "binding">,
  request: VerifyRequest,
  now: Date,
): Promise<VerifySuccess> {
  const profile = authorityProfiles.get(request.profile);
  if (profile === undefined) throw new VerifyError("unknown_profile");
  let digest: Sha256Ref;
  try {
    digest = argumentsDigest(request.arguments);
  } catch (error) {
    if (error instanceof ProfileArgumentsError) throw new VerifyError("invalid_arguments");
    throw error;
  }
  const { binding } = workload;
  if (request.bindingId !== binding.binding_id) throw new VerifyError("binding_mismatch");
  if (!binding.active) throw new VerifyError("binding_inactive");
  const permissionIds = await operations.permissionsOf(binding.partner_id, request.operationId);
  if (permissionIds.size === 0) throw new VerifyError("unsupported_operation");
  // Spec rule 2: the partner allowlist as invoke applies it (constraint_rollout_disabled there).
  if (await operations.outsideRollout(binding.partner_id, request.operationId)) {
    throw new VerifyError("operation_not_allowed");
  }

  const envelopes = runtime.envelopes;
  if (envelopes === undefined) throw new VerifyError("crypto_unavailable");
  let opened: Awaited<ReturnType<typeof envelopes.open>>;
  try {
    opened = await envelopes.open(request.protectedEnvelope, binding.partner_id, profile);
  } catch (error) {
    if (error instanceof EnvelopeCryptoUnavailableError)
      throw new VerifyError("crypto_unavailable", { cause: error });
    throw error;
  }
  if (!opened.ok) throw new VerifyError(opened.failure);
  const claims = parseEnvelopeClaims(opened.plaintext);
  if (claims === undefined) throw new VerifyError("invalid_envelope");
  const failure = checkEnvelopeClaims(claims, {
    profile,
    issuer: runtime.issuer,
    partnerId: binding.partner_id,
    bindingId: binding.binding_id,
    operationId: request.operationId,
    permissionIds,
    argsDigest: digest,
    now,
  });
  if (failure !== undefined) throw new VerifyError(failure);
  return {
    profile: profile.id,
    bindingId: binding.binding_id,
    operationId: request.operationId,
    decision: "allow",
    verified: true,
  };
}
