/**
 * The configuration of `authority inject`, the mutating admission webhook: its settings
 * (docs/configuration.md is generated from them) and the typed configuration it starts from.
 * The sidecar settings it injects are a separate file with its own schema
 * (src/servers/inject/settings.ts), named by `--settings-file`.
 */
import { ConfigError } from "../core/config-error.ts";
import { defineProcess, type ProcessInputs, resolveProcessConfig } from "./schema.ts";
import {
  duration,
  existingFile,
  type LogLevel,
  listenAddress,
  logLevelSetting,
  setting,
  text,
} from "./settings.ts";

export interface InjectCommandConfig {
  readonly host: string;
  readonly port: number;
  readonly tls: { readonly certFile: string; readonly keyFile: string };
  readonly sidecarImage?: string;
  readonly settingsFile?: string;
  /** How often the certificate files are checked for renewal; 0: never. */
  readonly tlsReloadSeconds: number;
  readonly logLevel: LogLevel;
}

export const injectSettings = {
  listen: setting({
    key: "listen",
    env: "AUTHORITY_INJECT_LISTEN",
    description: "HTTPS listen address",
    default: "0.0.0.0:8443",
    parse: listenAddress,
  }),
  tlsCert: setting({
    key: "tls-cert",
    env: "AUTHORITY_TLS_CERT_FILE",
    description: "PEM certificate served to the API server (required)",
    parse: existingFile,
  }),
  tlsKey: setting({
    key: "tls-key",
    env: "AUTHORITY_TLS_KEY_FILE",
    description: "PEM private key of --tls-cert (required)",
    parse: existingFile,
  }),
  sidecarImage: setting({
    key: "sidecar-image",
    env: "AUTHORITY_SIDECAR_IMAGE",
    description: "sidecar image (wins over the settings file)",
    defaultText: "ghcr.io/authority/authority:<version>",
    parse: text(),
  }),
  settingsFile: setting({
    key: "settings-file",
    env: "AUTHORITY_INJECT_SETTINGS_FILE",
    description: "YAML/JSON sidecar settings (the chart's injector ConfigMap; see below)",
    parse: existingFile,
  }),
  tlsReloadSeconds: setting({
    key: "tls-reload-seconds",
    env: "AUTHORITY_INJECT_TLS_RELOAD_SECONDS",
    description: "how often to check the certificate files for renewal, in seconds (0: never)",
    default: 60,
    parse: duration("s", 0, 86_400),
  }),
  logLevel: logLevelSetting(),
} as const;

const INJECT_NOTES = `The settings file (every key optional; \`src/servers/inject/settings.ts\` holds its JSON Schema
and refuses unknown keys): \`image\`, \`imagePullPolicy\`, \`authorityUrl\`, \`logLevel\`,
\`listenHost\`, \`ports\` (\`grpc\` 9191, \`proxy\` 15101, \`metrics\` 9464; none may be one of Istio's
ports 15000, 15001, 15004, 15006, 15008, 15009, 15020, 15021, 15053, 15090, and they must
differ), \`redis\` (\`url\` or \`urlSecret\`), \`cacheKeySecret\` (required with \`redis\`),
\`credentialsSecret\` (\`name\`, \`clientIdKey\`, \`clientSecretKey\`: the sidecar's own client, passed
as \`AUTHORITY_CLIENT_ID\` / \`AUTHORITY_CLIENT_SECRET\` via \`secretKeyRef\`), \`idpTokenUrl\`,
\`issuer\`, \`jwksUrl\`, \`audience\`, \`capabilityMap\`, \`egressAllow\` (a list of \`egress-allow\` entries, passed as
\`AUTHORITY_EGRESS_ALLOW\`), \`resources\`, \`istio\` (\`mode\`
\`auto\`/\`always\`/\`never\`, \`excludeInboundPorts\`), \`nativeSidecar\` (default \`false\`; the chart
renders \`true\` on Kubernetes 1.29+), \`prometheusAnnotations\`.`;

export const injectSchema = defineProcess({
  command: "inject",
  title: "Injector (`authority inject`)",
  settings: injectSettings,
  notes: INJECT_NOTES,
  build(read): InjectCommandConfig {
    const { host, port } = read.value("listen");
    const certFile = read.optional("tlsCert");
    const keyFile = read.optional("tlsKey");
    if (certFile === undefined || keyFile === undefined) {
      throw new ConfigError(
        "--tls-cert and --tls-key (AUTHORITY_TLS_CERT_FILE / AUTHORITY_TLS_KEY_FILE) are required",
      );
    }
    const sidecarImage = read.optional("sidecarImage");
    const settingsFile = read.optional("settingsFile");
    return {
      host,
      port,
      tls: { certFile, keyFile },
      ...(sidecarImage === undefined ? {} : { sidecarImage }),
      ...(settingsFile === undefined ? {} : { settingsFile }),
      tlsReloadSeconds: read.value("tlsReloadSeconds"),
      logLevel: read.value("logLevel"),
    };
  },
});

export function resolveInjectConfig(inputs: ProcessInputs): InjectCommandConfig {
  return resolveProcessConfig(injectSchema, inputs);
}
