/**
 * The pieces the binding routes share, built once per authority process by its composition
 * root (src/servers/authority/services.ts): the workload-token service, user-assertion
 * verifiers, idempotency, envelope crypto, the executor, and the process's decision runtime
 * (policy loader, capability resolver, audit recorder).
 */
import { isSecretBox, type SecretKeys } from "../admin/secret-box.ts";
import { isValidId } from "../core/ids.ts";
import type { EgressPolicy } from "../execute/egress.ts";
import type { Executor } from "../execute/executor.ts";
import type { Logger } from "../observability/logger.ts";
import { createEnforcementPipeline, type EnforcementPipeline } from "../pipeline/enforce.ts";
import type { KeyRingSource } from "../policy/local-protector.ts";
import type { PolicyProtector } from "../policy/protector.ts";
import type { DecisionRuntime } from "../policy/runtime.ts";
import { collections, storeKeys } from "../store/model.ts";
import type { Store } from "../store/store.ts";
import { type AssertionVerifiers, createAssertionVerifiers } from "./assertions.ts";
import { type BindingRecords, createBindingRecords } from "./binding-records.ts";
import { createKeyRingEnvelopeCrypto, type EnvelopeCrypto } from "./envelope-crypto.ts";
import { createIdempotency, type Idempotency, type IdempotencyOptions } from "./idempotency.ts";
import { createTokenKeys } from "./token-keys.ts";
import { createWorkloadTokenService, type WorkloadTokenService } from "./workload-tokens.ts";

export interface BindingRuntimeOptions {
  /**
   * Key rings of partner envelope signers (`partner:<id>`) and of the service identity
   * (`service:<identity>`). Default: the context's `secretKeyRings`. None at all: envelopes
   * cannot be issued or verified (invoke and verify answer 503).
   */
  readonly envelopeKeyRings?: KeyRingSource;
  /**
   * Envelope crypto to use as is (the crypto service with the service identity: no envelope
   * key ring in this process); takes precedence over key rings.
   */
  readonly envelopes?: EnvelopeCrypto;
  /** Seals the workload-token signing key at rest. Default: the context's `secretKeyRings`. */
  readonly tokenKeyRings?: SecretKeys;
  /** Default 300 s. */
  readonly workloadTokenLifetimeSec?: number;
  readonly idempotency?: Omit<IdempotencyOptions, "store" | "now">;
  /** Upstream deadline of the binding executor (`--binding-upstream-timeout-ms`), which the composition root builds. */
  readonly upstreamTimeoutMs?: number;
  /** How long the binding's records are reused (`record-cache-ms`; default 0: read every call). */
  readonly recordCacheMs?: number;
}

/** The fields of the authority context this module reads. */
export interface BindingRuntimeOwner {
  readonly config: {
    readonly publicUrl: string;
    readonly serviceIdentity: string;
  };
  readonly store: Store;
  readonly protector: PolicyProtector;
  readonly logger: Logger;
  readonly now: () => Date;
  readonly secretKeyRings?: SecretKeys;
  readonly onPolicyChange?: (subjectId: string, head: number) => void | Promise<void>;
  /** Where upstream calls and partner JWKS fetches may go. */
  readonly egress: EgressPolicy;
}

export interface BindingRuntime {
  readonly tokens: WorkloadTokenService;
  readonly assertions: AssertionVerifiers;
  readonly idempotency: Idempotency;
  /** The binding, workload client, mapping, experience and auth profile an invoke reads. */
  readonly records: BindingRecords;
  /** Undefined when no key rings are configured: envelopes fail closed with 503. */
  readonly envelopes: EnvelopeCrypto | undefined;
  readonly executor: Executor;
  readonly decisions: DecisionRuntime;
  /** The one enforcement pipeline of invoke and broker, over `decisions` and `executor`. */
  readonly pipeline: EnforcementPipeline;
  /** The authority's public URL: issuer of workload tokens and envelopes. */
  readonly issuer: string;
}

/** What the process shares with the binding runtime instead of it building its own. */
export interface BindingRuntimeShared {
  readonly decisions: DecisionRuntime;
  /**
   * The binding executor, built by the composition root (the process's egress gate,
   * client-credentials cache, user grants and secret resolver; the binding upstream deadline).
   */
  readonly executor: Executor;
}

export function createBindingRuntime(
  owner: BindingRuntimeOwner,
  shared: BindingRuntimeShared,
  options: BindingRuntimeOptions = {},
): BindingRuntime {
  const { store, config } = owner;
  // Upstream calls and the partners' JWKS fetches share the one gate.
  const { egress } = owner;
  const issuer = config.publicUrl.replace(/\/+$/, "");
  const tokenKeyRings = options.tokenKeyRings ?? owner.secretKeyRings;
  // Envelope key rings: only real key rings (a secret box cannot sign).
  const secretRings =
    owner.secretKeyRings === undefined || isSecretBox(owner.secretKeyRings)
      ? undefined
      : owner.secretKeyRings;
  const envelopeKeyRings = options.envelopeKeyRings ?? secretRings;
  const { executor } = shared;
  return {
    tokens: createWorkloadTokenService({
      keys: createTokenKeys({
        store,
        now: owner.now,
        ...(tokenKeyRings === undefined ? {} : { keyRings: tokenKeyRings }),
      }),
      issuer,
      now: owner.now,
      ...(options.workloadTokenLifetimeSec === undefined
        ? {}
        : { lifetimeSec: options.workloadTokenLifetimeSec }),
    }),
    assertions: createAssertionVerifiers({ fetch: egress.fetch, now: owner.now }),
    idempotency: createIdempotency({ store, now: owner.now, ...options.idempotency }),
    records: createBindingRecords(store, options.recordCacheMs ?? 0),
    envelopes:
      options.envelopes ??
      (envelopeKeyRings === undefined
        ? undefined
        : createKeyRingEnvelopeCrypto({
            keyRings: envelopeKeyRings,
            serviceIdentity: config.serviceIdentity,
            partnerExists: async (partnerId) =>
              isValidId("partner", partnerId) &&
              (await store.get(collections.partners, storeKeys.partner(partnerId))) !== undefined,
          })),
    executor,
    decisions: shared.decisions,
    pipeline: createEnforcementPipeline({ decisions: shared.decisions, upstream: executor }),
    issuer,
  };
}
