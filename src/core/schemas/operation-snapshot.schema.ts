import { HTTP_METHODS } from "../http-method.ts";
import { nonEmptyString } from "./common.ts";
import { redactionRuleSchema } from "./redaction-rule.schema.ts";

/** Parameters of one location (path, query, headers) are described by one object schema. */
/**
 * A downstream MCP tool name as the MCP revisions allow it: 1–128 of [A-Za-z0-9_.-], and not
 * made of dots alone (it is also the last segment of the tool's path, "/tools/<name>").
 */
export const MCP_TOOL_NAME_PATTERN = "^[A-Za-z0-9_.-]*[A-Za-z0-9_-][A-Za-z0-9_.-]*$";

const objectSchema = {
  type: "object",
  required: ["type"],
  properties: { type: { const: "object" } },
} as const;

export const operationSnapshotSchema = {
  type: "object",
  additionalProperties: false,
  required: [
    "operation_id",
    "method",
    "path",
    "input_schema",
    "response_schema",
    "upstream_url_template",
    "auth_profile_ref",
    "response_rules",
    "parameter_constraints",
  ],
  properties: {
    operation_id: nonEmptyString(256),
    method: { enum: [...HTTP_METHODS] },
    path: { type: "string", pattern: "^/", maxLength: 2048 },
    summary: { type: "string", maxLength: 4096 },
    description: { type: "string", maxLength: 65536 },
    input_schema: {
      type: "object",
      additionalProperties: false,
      required: ["path", "query", "headers", "body"],
      properties: {
        path: objectSchema,
        query: objectSchema,
        headers: objectSchema,
        body: { type: ["object", "null"] },
      },
    },
    response_schema: { type: ["object", "null"] },
    upstream_url_template: {
      type: "string",
      maxLength: 4096,
      pattern: "^https?://[^\\s/?#]+(?:[/?#]\\S*)?$",
    },
    auth_profile_ref: nonEmptyString(256),
    response_rules: { type: "array", maxItems: 256, items: redactionRuleSchema },
    parameter_constraints: { type: "array", maxItems: 256, items: { type: "object" } },
    mcp_tool: {
      type: "object",
      additionalProperties: false,
      required: ["name"],
      properties: {
        name: { type: "string", minLength: 1, maxLength: 128, pattern: MCP_TOOL_NAME_PATTERN },
        annotations: {
          type: "object",
          additionalProperties: false,
          properties: {
            title: { type: "string", maxLength: 256 },
            readOnlyHint: { type: "boolean" },
            destructiveHint: { type: "boolean" },
            idempotentHint: { type: "boolean" },
            openWorldHint: { type: "boolean" },
          },
        },
      },
    },
  },
} as const;
