/** The one enforcement pipeline (docs/decisions/1301-one-enforcement-pipeline.md). */
export * from "./authorize.ts";
export * from "./decision.ts";
export * from "./enforce.ts";
export * from "./explain.ts";
export * from "./failure.ts";
