import { readFile } from "node:fs/promises";
import { extname } from "node:path";
import { parse as parseYaml } from "yaml";
import { ConfigError } from "./errors.ts";

const MAX_FILE_BYTES = 1024 * 1024;

/** Parses a config file's text: JSON for `.json`, YAML (a superset of JSON) otherwise. */
export function parseConfigText(textValue: string, fileName: string): Record<string, unknown> {
  let parsed: unknown;
  try {
    parsed =
      extname(fileName).toLowerCase() === ".json"
        ? JSON.parse(textValue)
        : parseYaml(textValue, { maxAliasCount: 0 });
  } catch {
    throw new ConfigError(`${fileName} is not valid ${extname(fileName) === ".json" ? "JSON" : "YAML"}`);
  }
  if (parsed === null || parsed === undefined) return {};
  if (typeof parsed !== "object" || Array.isArray(parsed)) {
    throw new ConfigError(`${fileName} must hold a mapping of setting names to values`);
  }
  return parsed as Record<string, unknown>;
}

export async function readConfigFile(path: string): Promise<Record<string, unknown>> {
  let content: Buffer;
  try {
    content = await readFile(path);
  } catch (error) {
    throw new ConfigError(`config file ${path} cannot be read`, { cause: error });
  }
  if (content.length > MAX_FILE_BYTES) throw new ConfigError(`config file ${path} is larger than 1 MiB`);
  return parseConfigText(content.toString("utf8"), path);
}
