/**
 * The four managed operations: which body field each reads, which upstream call it makes,
 * and the exact response body it returns (spec part B). Building the bodies is pure.
 */

import type {
  CryptoClient,
  CryptoCredentials,
  DecryptVerifyResult,
} from "../../clients/crypto-service/client.ts";
import type { BodyField } from "./request.ts";

export type OperationName = "encrypt" | "decrypt" | "sign-encrypt" | "decrypt-verify";

export interface Operation {
  readonly name: OperationName;
  readonly path: string;
  readonly field: BodyField;
  /** Whether the optional body field `purpose` applies (the two signature operations). */
  readonly takesPurpose: boolean;
  run(
    client: CryptoClient,
    credentials: CryptoCredentials,
    value: string,
    requestId: string,
    purpose: string | undefined,
    signedBlob?: boolean,
  ): Promise<Readonly<Record<string, unknown>>>;
}

/**
 * decrypt-verify: the four fields of the spec's table, plus `metadata` (spec note 3) with
 * the key ids, the signed purpose and the original signature — `signed_blob`, the signed
 * document, ML-DSA signature and plaintext, which anyone can check with the signer's public
 * key (the authority hands it to sidecars). Every value comes from the verified document.
 */
export function decryptVerifyBody(result: DecryptVerifyResult): Record<string, unknown> {
  return {
    decrypted_data: result.decryptedData,
    is_valid_signature: result.isValidSignature,
    signed_by: result.signedBy,
    signed_timestamp: result.signedTimestamp,
    metadata: {
      signer_key_id: result.signerKeyId,
      recipient_key_id: result.recipientKeyId,
      purpose: result.purpose,
      ...(result.signedBlob === undefined ? {} : { signed_blob: result.signedBlob }),
    },
  };
}

export const operations: readonly Operation[] = [
  {
    name: "encrypt",
    path: "/v1/encrypt",
    field: "data",
    takesPurpose: false,
    async run(client, credentials, value, requestId) {
      return { encrypted_data: (await client.encrypt(credentials, value, { requestId })).encryptedData };
    },
  },
  {
    name: "decrypt",
    path: "/v1/decrypt",
    field: "encrypted_data",
    takesPurpose: false,
    // Spec note 4: the upstream payload is passed back unchanged.
    async run(client, credentials, value, requestId) {
      return (await client.decrypt(credentials, value, { requestId })).payload;
    },
  },
  {
    name: "sign-encrypt",
    path: "/v1/sign-encrypt",
    field: "data",
    takesPurpose: true,
    async run(client, credentials, value, requestId, purpose) {
      const options = purpose === undefined ? { requestId } : { requestId, purpose };
      return { encrypted_data: (await client.signEncrypt(credentials, value, options)).encryptedData };
    },
  },
  {
    name: "decrypt-verify",
    path: "/v1/decrypt-verify",
    field: "encrypted_data",
    takesPurpose: true,
    async run(client, credentials, value, requestId, purpose, signedBlob) {
      const options = {
        requestId,
        ...(purpose === undefined ? {} : { purpose }),
        ...(signedBlob === false ? { signedBlob: false } : {}),
      };
      return decryptVerifyBody(await client.decryptVerify(credentials, value, options));
    },
  },
];
