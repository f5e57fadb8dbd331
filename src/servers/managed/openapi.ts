/**
 * How the managed API's operations appear in its OpenAPI document: the one body field each
 * reads (checked in the handler, which names every missing item at once, so described only)
 * and the `{ statusCode, body }` answer of spec part B.
 */

import type { RouteShorthandOptions } from "fastify";
import type { Operation, OperationName } from "./operations.ts";

const encryptedData = {
  type: "object",
  required: ["encrypted_data"],
  properties: { encrypted_data: { type: "string" } },
} as const;

const resultBodies: Readonly<Record<OperationName, Record<string, unknown>>> = {
  encrypt: encryptedData,
  "sign-encrypt": encryptedData,
  // Spec note 4: the upstream's decrypted payload is passed back unchanged.
  decrypt: { type: "object", additionalProperties: true, description: "The decrypted payload, unchanged." },
  "decrypt-verify": {
    type: "object",
    required: ["decrypted_data", "is_valid_signature", "signed_by", "signed_timestamp", "metadata"],
    properties: {
      decrypted_data: {},
      is_valid_signature: { type: "boolean" },
      signed_by: { type: "string" },
      signed_timestamp: { type: "string" },
      metadata: {
        type: "object",
        required: ["signer_key_id", "recipient_key_id", "purpose"],
        properties: {
          signer_key_id: { type: "string" },
          recipient_key_id: { type: "string" },
          purpose: { type: "string" },
          signed_blob: { type: "string" },
        },
      },
    },
  },
};

export const livenessSchema = {
  type: "object",
  required: ["status"],
  properties: { status: { type: "string", const: "ok" } },
} as const;

export function describeOperation(operation: Operation): RouteShorthandOptions {
  return {
    config: {
      documentedRequest: {
        body: {
          type: "object",
          required: [operation.field],
          properties: {
            [operation.field]: { type: "string", minLength: 1 },
            ...(operation.takesPurpose ? { purpose: { type: "string", minLength: 1, maxLength: 128 } } : {}),
            ...(operation.name === "decrypt-verify" ? { signed_blob: { type: "boolean" } } : {}),
          },
        },
      },
    },
    schema: {
      summary: operation.name,
      response: {
        200: {
          type: "object",
          required: ["statusCode", "body"],
          properties: { statusCode: { type: "integer", const: 200 }, body: resultBodies[operation.name] },
        },
      },
    },
  };
}
