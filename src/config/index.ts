/** Typed configuration from flags, environment and file, validated once at start. */
export * from "./authority.ts";
export * from "./errors.ts";
export * from "./file.ts";
export * from "./schema.ts";
export * from "./settings.ts";
