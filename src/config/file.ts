import { open } from "node:fs/promises";
import { createRequire } from "node:module";
import { extname } from "node:path";
import type * as Yaml from "yaml";
import { ConfigError } from "../core/config-error.ts";

const MAX_FILE_BYTES = 1024 * 1024;

/** The YAML library is loaded when a config file is read: most processes run without one (issue 30). */
const requireModule = createRequire(import.meta.url);
const yaml = (): typeof Yaml => requireModule("yaml") as typeof Yaml;

/**
 * YAML to JavaScript without the library's own reporting: it writes warnings (an unknown tag
 * such as `!secret`, a collection as a key) to stderr with the offending source line, which may
 * hold a secret. A warning is refused like an error, and only its position is ever shown.
 */
function parseYaml(textValue: string): unknown {
  const document = yaml().parseDocument(textValue, { logLevel: "error" });
  const problem = document.errors[0] ?? document.warnings[0];
  if (problem !== undefined) throw problem;
  return document.toJS({ maxAliasCount: 0 });
}

/** `:line:column` of a YAML error or warning (never the file's content). */
function yamlPosition(error: unknown): string {
  if (!(error instanceof yaml().YAMLError) || error.linePos === undefined) return "";
  const [start] = error.linePos;
  return `:${start.line}:${start.col}`;
}

/** V8's JSON errors carry no position: YAML (a superset of JSON) finds where most of them are. */
function positionOf(error: unknown, text: string, json: boolean): string {
  if (!json) return yamlPosition(error);
  try {
    parseYaml(text);
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
    parsed = json ? JSON.parse(textValue) : parseYaml(textValue);
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

/**
 * At most `limit` bytes of the file: the cap holds while reading, so a path naming a stream
 * that never ends (a FIFO, a device) stops at the cap instead of buffering it to its end.
 */
async function readAtMost(path: string, limit: number): Promise<Buffer> {
  const handle = await open(path, "r");
  try {
    const buffer = Buffer.alloc(limit);
    let filled = 0;
    while (filled < limit) {
      const { bytesRead } = await handle.read(buffer, filled, limit - filled, null);
      if (bytesRead === 0) break;
      filled += bytesRead;
    }
    return buffer.subarray(0, filled);
  } finally {
    await handle.close();
  }
}

export async function readConfigFile(path: string): Promise<Record<string, unknown>> {
  let content: Buffer;
  try {
    content = await readAtMost(path, MAX_FILE_BYTES + 1);
  } catch (error) {
    throw new ConfigError(`config file ${path} cannot be read`, { cause: error });
  }
  if (content.length > MAX_FILE_BYTES) throw new ConfigError(`config file ${path} is larger than 1 MiB`);
  return parseConfigText(content.toString("utf8"), path);
}
