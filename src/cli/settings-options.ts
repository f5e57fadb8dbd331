/**
 * The commander side of the one configuration mechanism (src/config/schema.ts): every
 * subcommand gets `--config` and one flag per setting of its schema, and hands the flags to
 * `loadProcessConfig`, which adds the environment and the file and validates once. Commander
 * applies no defaults and reads no environment: precedence and defaults live in one place.
 */
import { type Command, Option } from "commander";
import { allSettings, loadProcessConfig, type ProcessSchema } from "../config/schema.ts";
import { boolean, type SettingSpec, type Settings, settingType } from "../config/settings.ts";
import { ConfigError } from "../core/config-error.ts";

/** commander's attribute name for a flag key (`grpc-listen` → `grpcListen`). */
export function flagAttribute(key: string): string {
  return key.replace(/-([a-z])/g, (_match, letter: string) => letter.toUpperCase());
}

function defaultOf(spec: SettingSpec<unknown>): string | undefined {
  return spec.defaultText ?? (spec.default === undefined ? undefined : String(spec.default));
}

/** What `--help` shows as the flag's argument, from the setting's type. */
function placeholder(type: string): string {
  if (type.startsWith("path")) return "path";
  if (type.startsWith("duration")) return "duration";
  if (type.startsWith("integer")) return "n";
  if (type === "URL") return "url";
  if (type === "host:port") return "host:port";
  return "value";
}

/** The flag, as the help and the reference page show it. */
export function flagOf(spec: SettingSpec<unknown>): string | undefined {
  if (spec.noFlag === true) return undefined;
  if (spec.negatedFlag === true) return `--no-${spec.key}`;
  if (spec.parse === boolean) return `--${spec.key} [bool]`;
  return `--${spec.key} <${placeholder(settingType(spec))}>`;
}

/** Adds `--config` and a flag for every setting of the schema. */
export function addSettingOptions(command: Command, schema: ProcessSchema<Settings, unknown>): Command {
  for (const spec of allSettings(schema)) {
    const flag = flagOf(spec);
    if (flag === undefined) continue;
    const fallback = defaultOf(spec);
    const type = settingType(spec);
    const help = [
      spec.description,
      type.includes(" | ") ? ` (one of ${type.replaceAll(" | ", ", ")})` : "",
      fallback === undefined ? "" : ` (default ${fallback})`,
      spec.env === undefined ? "" : ` [env ${spec.env}]`,
    ].join("");
    command.addOption(new Option(flag, help));
    for (const alias of spec.flagAliases ?? []) {
      command.addOption(new Option(`--${alias} <value>`, `the same as --${spec.key}`));
    }
  }
  return command;
}

/** The flags the user gave, by setting key, as text (a bare boolean flag is `true`). */
export function givenFlags(
  options: Readonly<Record<string, unknown>>,
  schema: ProcessSchema<Settings, unknown>,
): Record<string, string> {
  const flags: Record<string, string> = {};
  for (const spec of allSettings(schema)) {
    if (spec.noFlag === true) continue;
    const value = [spec.key, ...(spec.flagAliases ?? [])]
      .map((key) => options[flagAttribute(key)])
      .find((given) => given !== undefined);
    if (typeof value === "string") flags[spec.key] = value;
    else if (value === true && spec.negatedFlag !== true) flags[spec.key] = "true";
    else if (value === false && spec.negatedFlag === true) flags[spec.key] = "false";
  }
  return flags;
}

/**
 * The process's validated configuration from its flags, the environment and `--config`; a
 * ConfigError ends the command with its one-line message (`authority serve: --listen …`).
 */
export async function loadCommandConfig<S extends Settings, C>(
  schema: ProcessSchema<S, C>,
  command: Command,
): Promise<C> {
  try {
    return await loadProcessConfig(schema, {
      flags: givenFlags(command.opts(), schema as unknown as ProcessSchema<Settings, unknown>),
    });
  } catch (error) {
    if (error instanceof ConfigError) command.error(`authority ${command.name()}: ${error.message}`);
    throw error;
  }
}
