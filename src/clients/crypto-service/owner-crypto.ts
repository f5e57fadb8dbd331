/**
 * One owner's sign-encrypt and decrypt-verify, whichever way the caller reaches the crypto
 * service: directly (`createDirectOwnerCrypto`: a bearer token from a token source plus the
 * owner's partner credentials) or through the managed crypto API (managed-client.ts: the five
 * credential headers; the managed API trades username and password for the token). The
 * policy protector and the envelope crypto of the authority service use this, so neither
 * knows which path is configured. Failures are CryptoClientErrors either way.
 */
import type { PublicKeyRingJson } from "../../crypto/index.ts";
import type { SignerKeyCache } from "../../crypto/signer-key-cache.ts";
import {
  type CryptoClient,
  CryptoClientError,
  type CryptoCredentials,
  type DecryptVerifyResult,
} from "./client.ts";
import { cryptoServiceSignerKeys, decryptVerifyWithUnwrap } from "./content-key-open.ts";

export interface OwnerSignEncryptOptions {
  readonly purpose: string;
}

export interface DecryptVerifyOptions {
  readonly purpose: string;
  /** Ask for the signed blob (default true); a path that may ignore this sends it anyway. */
  readonly signedBlob?: boolean;
}

export interface OwnerCrypto {
  /** The owner id the crypto service signs as (`service:<identity>`, `subject:<id>`). */
  readonly owner: string;
  /** Signed by this owner, encrypted to this owner. */
  signEncrypt(data: string, options: OwnerSignEncryptOptions): Promise<string>;
  /**
   * Decrypts with this owner's keys and verifies the signature (any signer the crypto service
   * knows); `purpose`, when given, must be the signed purpose.
   */
  decryptVerify(encryptedData: string, options: DecryptVerifyOptions): Promise<DecryptVerifyResult>;
}

/** A bearer token for the crypto service, and a way to drop one it refused. */
export interface ServiceTokenSource {
  get(): Promise<string>;
  invalidate(token: string): void;
}

export interface PartnerKeys {
  readonly apiKey: string;
  readonly accessKey: string;
  readonly secretKey: string;
}

/**
 * Calls `run` with a token; a token the crypto service refuses (401: expired early, keys
 * rotated at the identity provider) is dropped and replaced once.
 */
export async function withServiceToken<T>(
  tokens: ServiceTokenSource,
  run: (token: string) => Promise<T>,
): Promise<T> {
  const token = await tokens.get();
  try {
    return await run(token);
  } catch (error) {
    if (!(error instanceof CryptoClientError && error.code === "invalid_token")) throw error;
    tokens.invalidate(token);
    return run(await tokens.get());
  }
}

/**
 * An owner's operations straight at the crypto service. Decrypt-verify asks it only to unwrap
 * the envelope's content key and verifies here with the signer's public keys
 * (content-key-open.ts); `signerKeys` is shared by all owners of one process.
 */
export function createDirectOwnerCrypto(options: {
  readonly client: CryptoClient;
  readonly owner: string;
  readonly keys: PartnerKeys;
  readonly tokens: ServiceTokenSource;
  readonly signerKeys?: SignerKeyCache;
  /** `keys` are this owner's delegate's: act for `owner` (decision 2513). */
  readonly delegated?: boolean;
}): OwnerCrypto {
  const { client, keys, tokens } = options;
  const actAs = options.delegated === true ? { actAs: options.owner } : {};
  const credentials = (token: string): CryptoCredentials => ({ token, ...keys, ...actAs });
  const signerKeys = options.signerKeys ?? cryptoServiceSignerKeys(createPublicKeySource(client, tokens));
  const unwrap = (envelopeHeader: string) =>
    withServiceToken(tokens, (token) => client.unwrap(credentials(token), envelopeHeader));
  return {
    owner: options.owner,
    signEncrypt: (data, { purpose }) =>
      withServiceToken(tokens, async (token) => {
        const result = await client.signEncrypt(credentials(token), data, { purpose });
        return result.encryptedData;
      }),
    decryptVerify: (encryptedData, { purpose, signedBlob }) =>
      decryptVerifyWithUnwrap(encryptedData, {
        unwrap,
        signerKeys,
        purpose,
        signedBlob: signedBlob !== false,
      }),
  };
}

/** Public keys of an owner from the crypto service (any valid bearer may read them). */
export function createPublicKeySource(
  client: CryptoClient,
  tokens: ServiceTokenSource,
): (owner: string) => Promise<PublicKeyRingJson> {
  return (owner) => withServiceToken(tokens, (token) => client.publicKeys(token, owner));
}
