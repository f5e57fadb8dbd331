/**
 * Reads a mounted secret that holds named fields, in either of the two shapes a Kubernetes
 * mount gives: a JSON file (`{ "api_key": "…", … }`, one Secret key), or a directory with one
 * file per field (`<dir>/api_key`, …: a Secret or a projected volume that joins several
 * Secrets, decision 2601). Values are never echoed: errors name the path and the field only.
 */
import { readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { ConfigError } from "../core/config-error.ts";
import { isRecord } from "../core/own-property.ts";

const MAX_FIELD_BYTES = 64 * 1024;

async function readText(path: string, what: string): Promise<string> {
  try {
    const info = await stat(path);
    if (info.size > MAX_FIELD_BYTES) throw new ConfigError(`${what} is larger than ${MAX_FIELD_BYTES} bytes`);
    return await readFile(path, "utf8");
  } catch (error) {
    if (error instanceof ConfigError) throw error;
    const missing = (error as { code?: unknown }).code === "ENOENT";
    throw new ConfigError(`${what} ${missing ? "does not exist" : "cannot be read"}`);
  }
}

/**
 * The object a secret mount holds: the parsed JSON file, or, for a directory, `fields` read
 * from one file each (a trailing newline dropped, as `kubectl create secret --from-file` keeps
 * it); a field file that is absent is left out, so the caller's own check names it.
 */
export async function readSecretFields(
  path: string,
  fields: readonly string[],
  what: string,
): Promise<Record<string, unknown>> {
  let directory: boolean;
  try {
    directory = (await stat(path)).isDirectory();
  } catch (error) {
    const missing = (error as { code?: unknown }).code === "ENOENT";
    throw new ConfigError(`${what} ${path} ${missing ? "does not exist" : "cannot be read"}`);
  }
  if (directory) {
    const values: Record<string, unknown> = {};
    for (const field of fields) {
      const file = join(path, field);
      const exists = await stat(file).then(
        (info) => info.isFile(),
        () => false,
      );
      if (exists) values[field] = (await readText(file, `${what} ${file}`)).replace(/\r?\n$/, "");
    }
    return values;
  }
  const text = await readText(path, `${what} ${path}`);
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new ConfigError(`${what} ${path} is not JSON`);
  }
  if (!isRecord(json)) throw new ConfigError(`${what} ${path} must hold a JSON object`);
  return json;
}
