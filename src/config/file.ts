import { readFile } from "node:fs/promises";
import { extname } from "node:path";
import { parse as parseYaml, YAMLParseError } from "yaml";
import { ConfigError } from "./errors.ts";

const MAX_FILE_BYTES = 1024 * 1024;

/** `:line:column` of a YAML parse error (never the file's content). */
function yamlPosition(error: unknown): string {
  if (!(error instanceof YAMLParseError) || error.linePos === undefined) return "";
  const [start] = error.linePos;
  return `:${start.line}:${start.col}`;
}

/** V8's JSON errors carry no position: YAML (a superset of JSON) finds where most of them are. */
function positionOf(error: unknown, text: string, json: boolean): string {
  if (!json) return yamlPosition(error);
  try {
    parseYaml(text, { maxAliasCount: 0 });
    return "";
  } catch (yamlError) {
    return yamlPosition(yamlError);
  }
}

/** Parses a config file's text: JSON for `.json`, YAML (a superset of JSON) otherwise. */
export function parseConfigText(textValue: string, fileName: string): Record<string, unknown> {
  let parsed: unknown;
  const json = extname(fileName).toLowerCase() === ".json";
  try {
    parsed = json ? JSON.parse(textValue) : parseYaml(textValue, { maxAliasCount: 0 });
  } catch (error) {
    throw new ConfigError(
      `${fileName}${positionOf(error, textValue, json)} is not valid ${json ? "JSON" : "YAML"}`,
    );
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
