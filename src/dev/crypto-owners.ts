/**
 * Crypto-service owners of the development environment and their credential sets.
 *
 * The upstream crypto service keeps only digests of an owner's credentials, so whoever uses
 * an owner must keep the credentials themselves: here, in the dev vault (KEK-wrapped in the
 * store). Credentials are generated and stored first, then the owner is provisioned with
 * exactly those, so a crash in between never leaves an owner nobody can use.
 *
 * Policy protection uses them through `createUpstreamPolicyProtector`: `service:<identity>`
 * for platform_service_v2 policies and `subject:<id>` (one credential set per subject,
 * provisioned on first use) for subject_credentials_v1.
 */

import { generateCredentials } from "../clients/crypto-service/credentials.ts";
import type { PolicyProtectionContext } from "../policy/protector.ts";
import { policyKeyOwner } from "../policy/protector.ts";
import type { OwnerCredentials } from "../policy/upstream-protector.ts";
import type { CryptoServer, PartnerCredentials } from "../servers/crypto/index.ts";
import type { OwnerKind } from "../servers/crypto/owner-registry.ts";
import type { DevVault } from "./vault.ts";

export interface CryptoOwnersOptions {
  readonly crypto: Pick<CryptoServer, "hasOwner" | "provisionOwner">;
  readonly vault: DevVault;
}

export interface EnsureOwnerInput {
  readonly id: string;
  readonly kind: OwnerKind;
  /** Token subjects allowed to use the owner's credentials (all when absent). */
  readonly allowedSubjects?: readonly string[];
}

export interface CryptoOwners {
  /** The owner's credentials, provisioning the owner on first use. Concurrent calls share one provisioning. */
  ensure(input: EnsureOwnerInput): Promise<PartnerCredentials>;
}

const vaultName = (ownerId: string): string => `crypto-owner:${ownerId}`;

export function createCryptoOwners(options: CryptoOwnersOptions): CryptoOwners {
  const { crypto, vault } = options;
  // Dev tool: a handful of owners for one run; no bound or TTL needed, so no lru-cache.
  const ready = new Map<string, Promise<PartnerCredentials>>();

  async function provision(input: EnsureOwnerInput): Promise<PartnerCredentials> {
    const credentials = await vault.getOrCreate<PartnerCredentials>(vaultName(input.id), generateCredentials);
    if (!(await crypto.hasOwner(input.id))) {
      await crypto.provisionOwner({
        id: input.id,
        kind: input.kind,
        credentials,
        ...(input.allowedSubjects === undefined ? {} : { allowedSubjects: input.allowedSubjects }),
      });
    }
    return credentials;
  }

  return {
    ensure(input) {
      let pending = ready.get(input.id);
      if (pending === undefined) {
        pending = provision(input);
        ready.set(input.id, pending);
        // A failure is not remembered: the next call tries again.
        pending.catch(() => {
          if (ready.get(input.id) === pending) ready.delete(input.id);
        });
      }
      return pending;
    },
  };
}

export interface PolicyCredentialsOptions {
  readonly owners: CryptoOwners;
  readonly serviceIdentity: string;
  /** The authority service's bearer token for the crypto service. */
  readonly token: () => Promise<string>;
  /** The token subject the policy owners are bound to (only the authority may use them). */
  readonly authoritySubject: string;
}

/** `credentialsFor` of the upstream policy protector. */
export function policyCredentials(
  options: PolicyCredentialsOptions,
): (context: PolicyProtectionContext) => Promise<OwnerCredentials> {
  return async (context) => {
    const owner = policyKeyOwner(context, options.serviceIdentity);
    const [credentials, token] = await Promise.all([
      options.owners.ensure({
        id: owner,
        kind: context.cryptoVersion === "platform_service_v2" ? "service" : "subject",
        allowedSubjects: [options.authoritySubject],
      }),
      options.token(),
    ]);
    return { owner, token, ...credentials };
  };
}
