/** The pure domain core: no I/O. Everything other layers need is exported here. */
export * from "./canonical-json.ts";
export * from "./capability.ts";
export * from "./core-error.ts";
export * from "./decision.ts";
export * from "./http-method.ts";
export * from "./operation-snapshot.ts";
export * from "./parameter-constraints.ts";
export * from "./path-template.ts";
export * from "./permission-id.ts";
export * from "./policy-document.ts";
export * from "./redaction.ts";
export * from "./schema-validator.ts";
export { jsonPointerSchema, sha256RefSchema, timestampSchema } from "./schemas/common.ts";
export { operationSnapshotSchema } from "./schemas/operation-snapshot.schema.ts";
export { parameterConstraintSchema } from "./schemas/parameter-constraint.schema.ts";
export { policyApiEntrySchema, policySubjectSchema } from "./schemas/policy.schema.ts";
export { redactionRuleSchema } from "./schemas/redaction-rule.schema.ts";
export * from "./tool-name.ts";
