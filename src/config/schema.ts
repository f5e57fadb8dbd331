/**
 * One schema per process: the settings it reads (defined in settings.ts and the process's
 * module) and the function that turns their validated values into the typed configuration the
 * process's builder takes. `loadProcessConfig` is the only place a process reads its settings:
 * flags, then the environment, then the `--config` file, then defaults, validated once.
 */
import { resolve } from "node:path";
import { ConfigError } from "../core/config-error.ts";
import { readConfigFile } from "./file.ts";
import {
  configFileSetting,
  type ResolvedSetting,
  resolveSetting,
  type SettingInputs,
  type SettingSource,
  type SettingSpec,
  type Settings,
  unknownFileKeys,
} from "./settings.ts";

type ValueOf<S extends Settings, N extends keyof S> = S[N] extends SettingSpec<infer T> ? T : never;

/** What a schema's `build` reads settings through. */
export interface SettingReader<S extends Settings> {
  /** The setting's value, or its default; a setting with neither is reported as missing. */
  value<N extends keyof S & string>(name: N): ValueOf<S, N>;
  /** The setting's value or default, undefined when it has neither. */
  optional<N extends keyof S & string>(name: N): ValueOf<S, N> | undefined;
  /** Where each setting came from, by key (for the start-up log: never values). */
  sources(): Readonly<Record<string, SettingSource>>;
  /** The directory relative paths resolve against. */
  readonly cwd: string;
}

export interface ProcessSchema<S extends Settings, C> {
  /** The subcommand (`serve`, `sidecar`, …). */
  readonly command: string;
  /** The heading of its section in docs/configuration.md. */
  readonly title: string;
  readonly settings: S;
  /** The environment variable that may name the config file (only `authority serve` has one). */
  readonly configEnv?: string;
  /** Markdown the reference page prints after the table (why-free: what the settings do). */
  readonly notes?: string;
  build(read: SettingReader<S>): C;
}

export const defineProcess = <S extends Settings, C>(schema: ProcessSchema<S, C>): ProcessSchema<S, C> =>
  schema;

/** Every setting a process accepts: the schema's and `--config`. */
export function allSettings(schema: ProcessSchema<Settings, unknown>): SettingSpec<unknown>[] {
  return [configFileSetting(schema.configEnv), ...Object.values(schema.settings)];
}

export interface ProcessInputs extends SettingInputs {
  /** Working directory relative paths resolve against (default process.cwd()). */
  readonly cwd?: string;
}

/** Resolves from already-parsed inputs (no file I/O): what tests call. */
export function resolveProcessConfig<S extends Settings, C>(
  schema: ProcessSchema<S, C>,
  inputs: ProcessInputs,
): C {
  if (inputs.file !== undefined) {
    const unknown = unknownFileKeys(inputs.file, allSettings(schema as ProcessSchema<Settings, unknown>));
    if (unknown.length > 0) {
      throw new ConfigError(
        `${inputs.fileName ?? "the config file"} has unknown settings: ${unknown.map((k) => k.slice(0, 64)).join(", ")}`,
      );
    }
  }
  // Every value is validated before the schema combines them: a malformed setting is reported
  // as such, not as a consequence (a missing credential) of another one.
  const resolved = new Map<string, ResolvedSetting<unknown>>();
  for (const [name, spec] of Object.entries(schema.settings))
    resolved.set(name, resolveSetting(spec, inputs));
  const sources: Record<string, SettingSource> = {};
  for (const [name, setting] of resolved)
    sources[(schema.settings[name] as SettingSpec<unknown>).key] = setting.source;
  const read = <N extends keyof S & string>(name: N) => resolved.get(name) as ResolvedSetting<ValueOf<S, N>>;
  return schema.build({
    value(name) {
      const { value } = read(name);
      if (value === undefined) {
        const spec = schema.settings[name] as SettingSpec<unknown>;
        const env = spec.env === undefined ? "" : ` (${spec.env})`;
        throw new ConfigError(`--${spec.key}${env} is required`);
      }
      return value;
    },
    optional: (name) => read(name).value,
    sources: () => ({ ...sources }),
    cwd: inputs.cwd ?? process.cwd(),
  });
}

export interface LoadInputs {
  /** Values given as flags, by setting key. */
  readonly flags?: Readonly<Record<string, string | undefined>>;
  /** The environment (default: this process's). */
  readonly env?: Readonly<Record<string, string | undefined>>;
  readonly cwd?: string;
}

/** Reads the config file named by `--config` / AUTHORITY_CONFIG_FILE (if any), then resolves. */
export async function loadProcessConfig<S extends Settings, C>(
  schema: ProcessSchema<S, C>,
  inputs: LoadInputs,
): Promise<C> {
  const env = inputs.env ?? process.env;
  const cwd = inputs.cwd ?? process.cwd();
  const fileName = resolveSetting(configFileSetting(schema.configEnv), { ...inputs, env }).value;
  if (fileName === undefined) return resolveProcessConfig(schema, { ...inputs, env, cwd });
  const path = resolve(cwd, fileName);
  return resolveProcessConfig(schema, {
    ...inputs,
    env,
    cwd,
    file: await readConfigFile(path),
    fileName: path,
  });
}
