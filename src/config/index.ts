/** Typed configuration from flags, environment and file, validated once at start. */

export * from "../core/config-error.ts";
export * from "./authority.ts";
export * from "./file.ts";
export * from "./schema.ts";
export * from "./settings.ts";
