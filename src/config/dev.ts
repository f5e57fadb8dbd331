/**
 * The configuration of `authority dev` (every service on localhost with seeded demo data)
 * and `authority demo` (a walk through every path on a temporary environment).
 */
import type { EgressAllowEntry } from "../core/egress-address.ts";
import { defineProcess, type ProcessInputs, resolveProcessConfig } from "./schema.ts";
import {
  boolean,
  egressAllowSetting,
  type LogLevel,
  logLevelSetting,
  path,
  redisUrl,
  setting,
} from "./settings.ts";

export interface DevCommandConfig {
  readonly stateDir: string;
  readonly redisUrl?: string;
  readonly logLevel: LogLevel;
  readonly sidecar: boolean;
  /** Destinations beyond the sample API that the authority and the sidecar may call (your own APIs). */
  readonly egressAllow: readonly EgressAllowEntry[];
}

export interface DemoCommandConfig {
  readonly redisUrl?: string;
  readonly logLevel: LogLevel;
  readonly color: boolean;
}

const redisUrlSetting = setting({
  key: "redis-url",
  env: "AUTHORITY_REDIS_URL",
  description: "Redis for the sidecar's verified-policy cache (optional)",
  secret: true,
  parse: redisUrl,
});

export const devSettings = {
  stateDir: setting({
    key: "state-dir",
    env: "AUTHORITY_STATE_DIR",
    description: "embedded state: store, keys, dev-credentials.json",
    default: "./.authority",
    parse: path,
  }),
  redisUrl: redisUrlSetting,
  logLevel: logLevelSetting("warn"),
  sidecar: setting({
    key: "sidecar",
    description: "start the sidecar (`--no-sidecar`: do not)",
    negatedFlag: true,
    default: true,
    parse: boolean,
  }),
  // The authority and the sidecar `dev` starts take it as theirs, beside the sample API.
  egressAllow: egressAllowSetting,
} as const;

export const devSchema = defineProcess({
  command: "dev",
  title: "Development environment (`authority dev`)",
  settings: devSettings,
  notes: `Component logs go to stderr, the instructions to stdout. The authority and the sidecar it starts
may call the sample API and what \`egress-allow\` lists: an API of your own on this machine is
\`AUTHORITY_EGRESS_ALLOW=127.0.0.1:19090 make dev\` (docs/protect-your-api.md).`,
  build(read): DevCommandConfig {
    const redis = read.optional("redisUrl");
    return {
      stateDir: read.value("stateDir"),
      ...(redis === undefined ? {} : { redisUrl: redis }),
      logLevel: read.value("logLevel"),
      sidecar: read.value("sidecar"),
      egressAllow: read.optional("egressAllow") ?? [],
    };
  },
});

export const demoSettings = {
  redisUrl: redisUrlSetting,
  logLevel: logLevelSetting("error", false),
  color: setting({
    key: "color",
    description: "colour the output on a terminal (`--no-color`: plain)",
    negatedFlag: true,
    default: true,
    parse: boolean,
  }),
} as const;

export const demoSchema = defineProcess({
  command: "demo",
  title: "Demo (`authority demo`)",
  settings: demoSettings,
  build(read): DemoCommandConfig {
    const redis = read.optional("redisUrl");
    return {
      ...(redis === undefined ? {} : { redisUrl: redis }),
      logLevel: read.value("logLevel"),
      color: read.value("color"),
    };
  },
});

export function resolveDevConfig(inputs: ProcessInputs): DevCommandConfig {
  return resolveProcessConfig(devSchema, inputs);
}

export function resolveDemoConfig(inputs: ProcessInputs): DemoCommandConfig {
  return resolveProcessConfig(demoSchema, inputs);
}
