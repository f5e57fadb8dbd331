/**
 * The wire contract of decision records a sidecar ships to the authority
 * (`POST /v1/sidecar/decisions`): the record, the batch limit and the body schema. Both ends
 * import it from here, so neither server imports the other.
 */
import { errorCodes } from "../errors.ts";
import type { DecisionInput } from "./records.ts";

/** A decision record as the sidecar sends it: the recorder's input plus the record id. */
export interface ShippedDecision extends DecisionInput {
  readonly id: string;
  readonly transport: "grpc" | "proxy";
  readonly time: string;
}

/** Records per request the authority accepts. */
export const MAX_DECISIONS_PER_BATCH = 500;

const nullableText = (maxLength: number) => ({
  anyOf: [{ type: "string", minLength: 1, maxLength }, { type: "null" }],
});

/** The body of `POST /v1/sidecar/decisions`: one batch of shipped decisions. */
export const decisionBatchSchema = {
  type: "object",
  additionalProperties: false,
  required: ["records"],
  properties: {
    // The sidecar exported these records itself: the authority does not (decision 2797).
    exported: { type: "boolean" },
    records: {
      type: "array",
      minItems: 1,
      maxItems: MAX_DECISIONS_PER_BATCH,
      items: {
        type: "object",
        additionalProperties: false,
        required: [
          "id",
          "actor",
          "subject_id",
          "partner_id",
          "capability_id",
          "method",
          "path",
          "permission_id",
          "decision",
          "reason",
          "transport",
          "requestId",
          "time",
        ],
        properties: {
          id: { type: "string", pattern: "^dec_[A-Za-z0-9-]{1,64}$" },
          actor: nullableText(1024),
          subject_id: nullableText(1024),
          partner_id: nullableText(1024),
          capability_id: nullableText(1024),
          method: nullableText(16),
          path: nullableText(1024),
          permission_id: nullableText(2048),
          decision: { enum: ["allowed", "denied"] },
          reason: { anyOf: [{ enum: Object.keys(errorCodes) }, { type: "null" }] },
          transport: { enum: ["grpc", "proxy"] },
          requestId: { type: "string", minLength: 1, maxLength: 128 },
          time: { type: "string", format: "date-time" },
          // What the subject's shadow policy decided, and a log-only allow (decision 2761).
          shadow: {
            type: "object",
            additionalProperties: false,
            required: ["decision", "reason", "agrees"],
            properties: {
              decision: { enum: ["allowed", "denied", "invalid"] },
              reason: { anyOf: [{ enum: Object.keys(errorCodes) }, { type: "null" }] },
              agrees: { type: "boolean" },
            },
          },
          log_only: {
            type: "object",
            additionalProperties: false,
            required: ["reason"],
            properties: { reason: { enum: Object.keys(errorCodes) } },
          },
        },
      },
    },
  },
} as const;
