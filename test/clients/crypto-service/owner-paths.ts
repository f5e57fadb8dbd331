/**
 * The authority's two ways of opening with the crypto service, side by side for tests that
 * must see them agree: the direct path (unwrap the content key, decrypt and verify here) and
 * the crypto service's own decrypt-verify (`d`+`v`); and any result or failure as one string.
 */
import { type CryptoClient, isDataFault } from "../../../src/clients/crypto-service/client.ts";
import {
  createDirectOwnerCrypto,
  type OwnerCrypto,
  type PartnerKeys,
} from "../../../src/clients/crypto-service/owner-crypto.ts";
import type { ProvisionedOwner } from "../../../src/servers/crypto/server.ts";

export function partnerKeysOf(owner: ProvisionedOwner): PartnerKeys {
  return { apiKey: owner.apiKey, accessKey: owner.accessKey, secretKey: owner.secretKey };
}

/** The direct path (`--policy-protection crypto`), with its own signer-key cache. */
export function directPath(client: CryptoClient, owner: ProvisionedOwner, token: () => Promise<string>) {
  return createDirectOwnerCrypto({
    client,
    owner: owner.id,
    keys: partnerKeysOf(owner),
    tokens: { get: token, invalidate: () => undefined },
  });
}

/** The same operations answered by the crypto service's own sign-encrypt and decrypt-verify. */
export function servicePath(
  client: CryptoClient,
  owner: ProvisionedOwner,
  token: () => Promise<string>,
): OwnerCrypto {
  const credentials = async () => ({ token: await token(), ...partnerKeysOf(owner) });
  return {
    owner: owner.id,
    signEncrypt: async (data, { purpose }) =>
      (await client.signEncrypt(await credentials(), data, { purpose })).encryptedData,
    decryptVerify: async (data, options) => client.decryptVerify(await credentials(), data, options),
  };
}

/** "ok:<JSON of the value>", or "<error name>:<code>:<whether a data fault>". */
export function outcome(promise: Promise<unknown>): Promise<string> {
  return promise.then(
    (value) => `ok:${JSON.stringify(value)}`,
    (error: unknown) =>
      `${(error as Error).name}:${String((error as { code?: unknown }).code)}:${isDataFault(error)}`,
  );
}
