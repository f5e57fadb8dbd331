const scalar = { type: ["string", "number", "boolean", "null"] } as const;

/**
 * The strict shape of one parameter constraint, for import-time checks. The policy
 * schemas accept any object in `parameter_constraints` on purpose: a malformed
 * constraint then fails only its own operation, closed, at evaluation time
 * (constraint_metadata_invalid), instead of voiding the whole policy.
 */
export const parameterConstraintSchema = {
  type: "object",
  additionalProperties: false,
  required: ["in", "name"],
  properties: {
    in: { enum: ["path", "query", "header", "body"] },
    name: { type: "string", minLength: 1, maxLength: 1024 },
    required: { type: "boolean" },
    allowed_values: { type: "array", minItems: 1, maxItems: 1000, items: scalar },
    excluded_values: { type: "array", minItems: 1, maxItems: 1000, items: scalar },
    pattern: { type: "string", minLength: 1, maxLength: 256 },
    max_length: { type: "integer", minimum: 0 },
    minimum: { type: "number" },
    maximum: { type: "number" },
  },
} as const;
