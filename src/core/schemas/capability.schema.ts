import { capabilityIdSchema, nonEmptyString } from "./common.ts";
import { operationSnapshotSchema } from "./operation-snapshot.schema.ts";

/** A partner-scoped API catalog, as imported from OpenAPI. */
export const capabilitySchema = {
  $schema: "https://json-schema.org/draft/2020-12/schema",
  $id: "urn:authority:schema:capability",
  type: "object",
  additionalProperties: false,
  required: ["capability_id", "partner_id", "name", "catalog_version", "operations"],
  properties: {
    capability_id: capabilityIdSchema,
    partner_id: nonEmptyString(256),
    name: nonEmptyString(256),
    catalog_version: nonEmptyString(256),
    operations: { type: "array", maxItems: 4096, items: operationSnapshotSchema },
  },
} as const;
