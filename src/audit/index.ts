/** Audit, MCP audit, usage and evidence records (docs/authorize.md, "Audit guarantees"). */
export * from "./mcp-records.ts";
export * from "./recorder.ts";
export * from "./records.ts";
export * from "./usage.ts";
export * from "./writer.ts";
