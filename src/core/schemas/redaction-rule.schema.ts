import { jsonPointerSchema } from "./common.ts";

/** A response redaction rule: JSON pointer (with the "*" extension), mode, keep_last. */
export const redactionRuleSchema = {
  type: "object",
  additionalProperties: false,
  required: ["path", "mode"],
  properties: {
    path: jsonPointerSchema,
    mode: { enum: ["remove", "mask"] },
    keep_last: { type: "integer", minimum: 0, maximum: 1024 },
  },
} as const;
