/** Hosted MCP (docs/mcp.md): tools by role and by verified policy, on the shared decision path. */
export * from "./api-tools.ts";
export * from "./call-result.ts";
export * from "./config.ts";
export * from "./management-tools.ts";
export * from "./origin.ts";
export * from "./protocol-server.ts";
export * from "./resource-metadata.ts";
export * from "./secret-cache.ts";
export * from "./service.ts";
export * from "./tool-cache.ts";
export * from "./tool-input-schema.ts";
