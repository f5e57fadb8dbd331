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
  run(
    client: CryptoClient,
    credentials: CryptoCredentials,
    value: string,
    requestId: string,
  ): Promise<Readonly<Record<string, unknown>>>;
}

/**
 * decrypt-verify: the four fields of the spec's table, plus `metadata` (spec note 3) with
 * the key ids and the signed purpose. Every value comes from the verified signed document.
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
    },
  };
}

export const operations: readonly Operation[] = [
  {
    name: "encrypt",
    path: "/v1/encrypt",
    field: "data",
    async run(client, credentials, value, requestId) {
      return { encrypted_data: (await client.encrypt(credentials, value, { requestId })).encryptedData };
    },
  },
  {
    name: "decrypt",
    path: "/v1/decrypt",
    field: "encrypted_data",
    // Spec note 4: the upstream payload is passed back unchanged.
    async run(client, credentials, value, requestId) {
      return (await client.decrypt(credentials, value, { requestId })).payload;
    },
  },
  {
    name: "sign-encrypt",
    path: "/v1/sign-encrypt",
    field: "data",
    async run(client, credentials, value, requestId) {
      return { encrypted_data: (await client.signEncrypt(credentials, value, { requestId })).encryptedData };
    },
  },
  {
    name: "decrypt-verify",
    path: "/v1/decrypt-verify",
    field: "encrypted_data",
    async run(client, credentials, value, requestId) {
      return decryptVerifyBody(await client.decryptVerify(credentials, value, { requestId }));
    },
  },
];
