/**
 * Who holds the keys that protect policies and sign envelopes, from the configuration:
 *
 * - `crypto`: the crypto service, called directly with the service identity's partner
 *   credentials and the IdP token of its service account (password grant, cached until
 *   shortly before expiry; a token the crypto service refuses is replaced once).
 * - `managed`: the same keys through the managed crypto API, with the five credential
 *   headers (the managed API does the password grant and caches the token).
 * - `embedded`: key rings in this process's store under its KEK — the one-process mode,
 *   said at start.
 *
 * In `crypto` and `managed` modes policies (v2: the service identity; v1: the subject's own
 * owner, provisioned and acted for by the service identity — delegated-subject-keys.ts),
 * authority envelopes and the
 * secrets at rest (auth-profile secrets, the workload-token signing key; all three with the
 * service identity) are signed, encrypted, decrypted and verified by the crypto service: this
 * process loads no KEK and holds no key ring.
 */
import { readFile } from "node:fs/promises";
import type { SecretBox } from "../../admin/secret-box.ts";
import { SecretSealError } from "../../admin/secret-seal.ts";
import type { CheckpointSigner } from "../../audit/checkpoints.ts";
import type { EnvelopeCrypto } from "../../bindings/envelope-crypto.ts";
import { createServiceEnvelopeCrypto } from "../../bindings/envelope-service-crypto.ts";
import { createCryptoClient, isDataFault } from "../../clients/crypto-service/client.ts";
import { cryptoServiceSignerKeys } from "../../clients/crypto-service/content-key-open.ts";
import { createManagedCryptoClient } from "../../clients/crypto-service/managed-client.ts";
import {
  createDirectOwnerCrypto,
  createPublicKeySource,
  type OwnerCrypto,
  type ServiceTokenSource,
  withServiceToken,
} from "../../clients/crypto-service/owner-crypto.ts";
import { passwordGrant } from "../../clients/idp/password-grant.ts";
import { createTokenCache } from "../../clients/idp/token-cache.ts";
import type { AuthorityConfig } from "../../config/authority.ts";
import { loadServiceCryptoCredentials } from "../../config/service-crypto-credentials.ts";
import { ConfigError } from "../../core/config-error.ts";
import type { Logger } from "../../observability/logger.ts";
import { createDelegatedSubjectKeys } from "../../policy/delegated-subject-keys.ts";
import { createLocalPolicyProtector, type KeyRingSource } from "../../policy/local-protector.ts";
import type { PolicyProtectionContext, PolicyProtector } from "../../policy/protector.ts";
import { createUpstreamPolicyProtector } from "../../policy/upstream-protector.ts";
import { keyRingCheckpointSigner, serviceCheckpointSigner } from "./checkpoint-signers.ts";

export interface KeyCustody {
  readonly protector: PolicyProtector;
  /** Undefined in the embedded mode: envelopes use the process's key rings. */
  readonly envelopes: EnvelopeCrypto | undefined;
  /** Seals secrets at rest; undefined in the embedded mode (the process's key rings do). */
  readonly secrets: SecretBox | undefined;
  /** Signs the decision chains' checkpoints as the service identity, where its key lives. */
  readonly checkpoints: CheckpointSigner;
}

/** What secrets at rest are signed for: no policy or envelope passes as one, nor the reverse. */
const SECRET_PURPOSE = "authority-secret/v1";

/**
 * Secrets at rest sealed by the crypto service with the service identity (signed and
 * encrypted to itself); the aad travels inside the signed plaintext and must match on open.
 */
export function createServiceSecretBox(service: OwnerCrypto): SecretBox {
  const unavailable = (cause: unknown) =>
    new SecretSealError("secret_storage_unavailable", "the crypto service cannot seal or open secrets", {
      cause,
    });
  const unreadable = (why: string, cause?: unknown) =>
    new SecretSealError("secret_unreadable", `sealed secret rejected: ${why}`, { cause });
  return {
    async seal(aad, secret) {
      try {
        return await service.signEncrypt(JSON.stringify({ aad, secret }), { purpose: SECRET_PURPOSE });
      } catch (error) {
        throw unavailable(error);
      }
    },
    async open(aad, sealed) {
      let opened: Awaited<ReturnType<OwnerCrypto["decryptVerify"]>>;
      try {
        opened = await service.decryptVerify(sealed, { purpose: SECRET_PURPOSE });
      } catch (error) {
        if (isDataFault(error)) throw unreadable(error.code, error);
        throw unavailable(error);
      }
      if (opened.signedBy !== service.owner) throw unreadable("signer");
      let value: unknown;
      try {
        value = JSON.parse(opened.decryptedData);
      } catch {
        throw unreadable("form");
      }
      const fields = value as { aad?: unknown; secret?: unknown } | null;
      if (fields?.aad !== aad || typeof fields.secret !== "string") throw unreadable("aad");
      return fields.secret;
    },
  };
}

const CALL_TIMEOUT_MS = 5000;

async function readCa(path: string): Promise<Buffer> {
  try {
    return await readFile(path);
  } catch {
    throw new ConfigError(`the managed API CA file ${path} cannot be read`);
  }
}

export async function configuredKeyCustody(
  config: AuthorityConfig,
  keyRings: () => Promise<KeyRingSource>,
  logger: Logger,
): Promise<KeyCustody> {
  const protection = config.policyProtection;
  if (protection.mode === "embedded") {
    logger.warn(
      { policyProtection: "embedded" },
      "policy protection: EMBEDDED key rings under this process's KEK (the one-process mode; in a deployment use --policy-protection crypto or managed)",
    );
    return {
      protector: createLocalPolicyProtector({
        keyRings: await keyRings(),
        serviceIdentity: config.serviceIdentity,
      }),
      envelopes: undefined,
      secrets: undefined,
      checkpoints: keyRingCheckpointSigner(async () =>
        (await keyRings()).keyRing(`service:${config.serviceIdentity}`),
      ),
    };
  }
  const credentials = await loadServiceCryptoCredentials(protection.credentialsFile);
  const cache = createTokenCache(
    passwordGrant({ tokenUrl: protection.tokenUrl, timeoutMs: CALL_TIMEOUT_MS }),
  );
  const tokens: ServiceTokenSource = {
    get: () => cache.get(credentials.username, credentials.password),
    invalidate: (token) => cache.invalidate(credentials.username, credentials.password, token),
  };
  const cryptoClient = createCryptoClient({ baseUrl: config.cryptoUrl, timeoutMs: CALL_TIMEOUT_MS });
  const serviceOwner = `service:${config.serviceIdentity}`;
  /** `delegated`: the keys are the service identity's, acting for `owner` (decision 2513). */
  let ownerOf: (owner: string, keys: typeof credentials.service, delegated?: boolean) => OwnerCrypto;
  if (protection.mode === "managed") {
    const managed = createManagedCryptoClient({
      baseUrl: config.managedUrl,
      timeoutMs: CALL_TIMEOUT_MS,
      ...(protection.managedCaFile === undefined ? {} : { ca: await readCa(protection.managedCaFile) }),
    });
    ownerOf = (owner, keys, delegated) =>
      managed.owner(owner, {
        username: credentials.username,
        password: credentials.password,
        ...keys,
        ...(delegated === true ? { actAs: owner } : {}),
      });
  } else {
    // Decrypt-verify checks signatures here with public keys: one key cache for every owner.
    const signerKeys = cryptoServiceSignerKeys(createPublicKeySource(cryptoClient, tokens));
    ownerOf = (owner, keys, delegated) =>
      createDirectOwnerCrypto({
        client: cryptoClient,
        owner,
        keys,
        tokens,
        signerKeys,
        ...(delegated === true ? { delegated } : {}),
      });
  }
  const service = ownerOf(serviceOwner, credentials.service);
  const listed = new Map<string, OwnerCrypto>();
  for (const [subjectId, keys] of credentials.subjects) {
    listed.set(subjectId, ownerOf(`subject:${subjectId}`, keys));
  }
  // Owners are provisioned, rotated and retired at the crypto service directly in both modes
  // (the managed API has only its four operations), with the service identity's credentials.
  const subjects = createDelegatedSubjectKeys({
    delegatedOwner: (owner) => ownerOf(owner, credentials.service, true),
    lifecycle: (owner, operation) =>
      withServiceToken(tokens, (token) =>
        cryptoClient.delegatedOwner({ token, ...credentials.service }, owner, operation),
      ),
    listed,
    now: () => new Date(),
  });
  const ownerFor = async (context: PolicyProtectionContext): Promise<OwnerCrypto> =>
    context.cryptoVersion === "platform_service_v2" ? service : subjects.ownerFor(context.subjectId);
  logger.info(
    {
      policyProtection: protection.mode,
      via: protection.mode === "managed" ? config.managedUrl : config.cryptoUrl,
      signer: serviceOwner,
    },
    "policy and envelope protection: the crypto service (no policy or envelope key in this process)",
  );
  return {
    protector: {
      ...createUpstreamPolicyProtector({ ownerFor, publicKeys: createPublicKeySource(cryptoClient, tokens) }),
      subjectKeys: subjects.custody,
    },
    envelopes: createServiceEnvelopeCrypto({ service }),
    secrets: createServiceSecretBox(service),
    checkpoints: serviceCheckpointSigner(service),
  };
}
