import { Ajv2020 } from "ajv/dist/2020.js";
import {
  DEFAULT_SIDECAR_PROXY_PORT,
  isIstioReservedPort,
  istioPortMessage,
} from "../../config/istio-ports.ts";
import { egressAllowList } from "../../config/validators.ts";
import { ConfigError } from "../../core/config-error.ts";

/**
 * What the injector puts into every pod: read once at start from the settings file the
 * Helm chart renders into a ConfigMap (`settings.yaml`), validated here so that a typo
 * fails the injector's start instead of producing broken pods.
 */

export interface SecretKeyRef {
  readonly name: string;
  readonly key: string;
}

/**
 * The sidecar's own workload credential: a client of the identity provider (role `sidecar` or
 * scope `authority/sidecar`), kept in a Secret of the pod's namespace and passed as
 * AUTHORITY_CLIENT_ID / AUTHORITY_CLIENT_SECRET (secretKeyRef): the sidecar fetches its token
 * with the client-credentials grant and renews it before it expires.
 */
export interface CredentialsSecret {
  readonly name: string;
  readonly clientIdKey: string;
  readonly clientSecretKey: string;
}

export interface ResourceList {
  readonly cpu?: string;
  readonly memory?: string;
}

export interface SidecarResources {
  readonly requests?: ResourceList;
  readonly limits?: ResourceList;
}

/**
 * `auto`: Istio handling when the pod or its namespace shows Istio signs (the namespace's
 * labels reach the injector through the webhook it is called on); `always`/`never` force it.
 */
export type IstioMode = "auto" | "always" | "never";

export interface SidecarSettings {
  readonly image: string;
  readonly imagePullPolicy: "Always" | "IfNotPresent" | "Never";
  readonly authorityUrl: string;
  readonly logLevel: string;
  /** Address the ext_authz and forward-proxy listeners bind to inside the pod. */
  readonly listenHost: "127.0.0.1" | "0.0.0.0";
  readonly ports: { readonly grpc: number; readonly proxy: number; readonly metrics: number };
  readonly redis:
    | { readonly url: string; readonly urlSecret?: undefined }
    | { readonly url?: undefined; readonly urlSecret: SecretKeyRef }
    | undefined;
  readonly cacheKeySecret: SecretKeyRef | undefined;
  readonly credentialsSecret: CredentialsSecret | undefined;
  /** AUTHORITY_IDP_TOKEN_URL; unset: the sidecar uses `<issuer>/oauth2/token`. */
  readonly idpTokenUrl: string | undefined;
  readonly issuer: string | undefined;
  readonly jwksUrl: string | undefined;
  readonly audience: string | undefined;
  /** AUTHORITY_TRUSTED_ISSUERS of the sidecar (entries as docs/configuration.md; the sidecar validates them). */
  readonly trustedIssuers: readonly Readonly<Record<string, unknown>>[] | undefined;
  readonly capabilityMap: Readonly<Record<string, string>> | undefined;
  /** AUTHORITY_EGRESS_ALLOW of the sidecar: the platform admin's allow list (entries as docs/configuration.md). */
  readonly egressAllow: readonly string[];
  readonly resources: SidecarResources;
  readonly istio: {
    readonly mode: IstioMode;
    /** Keep kubelet probes and scrapes on the sidecar's ports out of Istio's inbound capture. */
    readonly excludeInboundPorts: boolean;
  };
  /**
   * Inject as a native sidecar (an init container with `restartPolicy: Always`, Kubernetes
   * 1.29+): it starts, and passes its startup probe, before the app's containers, and it does
   * not keep a Job's pod alive. Off: a regular container beside the app's.
   */
  readonly nativeSidecar: boolean;
  readonly prometheusAnnotations: boolean;
  /** AUTHORITY_SIDECAR_SHUTDOWN_WAIT_MS: on SIGTERM, how long the sidecar keeps answering while not ready. */
  readonly shutdownWaitMs: number;
}

export const defaultSidecarImage = (version: string): string => `ghcr.io/authority/authority:${version}`;

/**
 * One sidecar per pod, so small; the memory request is above what a sidecar holds at 1,000
 * Checks/s with the injected settings (RSS 119–144 MB, median ≈ 123 MiB; decision 3041), the
 * limit leaves room for V8's heap limit (SIDECAR_NODE_OPTIONS: 128 MB old generation) above the
 * process's ≈ 50–75 MB outside the heap (docs/sidecar.md, "Memory"). The chart's
 * `sidecar.resources` repeats them.
 */
export const defaultSidecarResources: SidecarResources = {
  requests: { cpu: "50m", memory: "144Mi" },
  limits: { memory: "256Mi" },
};

/** The sidecar's own default (`--shutdown-wait-ms`): a few seconds for the endpoints to be withdrawn. */
export const DEFAULT_SHUTDOWN_WAIT_MS = 5000;

/** Where the cache key Secret is mounted inside the sidecar. */
export const cacheKeyMountPath = "/var/run/authority/cache-key";

export class InjectorSettingsError extends Error {
  readonly code = "invalid_injector_settings";
  constructor(message: string) {
    super(message);
    this.name = "InjectorSettingsError";
  }
}

const port = { type: "integer", minimum: 1, maximum: 65535 } as const;
const secretRef = {
  type: "object",
  additionalProperties: false,
  required: ["name", "key"],
  properties: {
    name: { type: "string", pattern: "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", maxLength: 253 },
    key: { type: "string", pattern: "^[-._a-zA-Z0-9]+$", maxLength: 253 },
  },
} as const;
const quantity = { type: "string", pattern: "^[0-9]+(\\.[0-9]+)?(m|Ki|Mi|Gi|Ti|k|M|G|T)?$" } as const;
const resourceList = {
  type: "object",
  additionalProperties: false,
  properties: { cpu: quantity, memory: quantity },
} as const;

/** JSON Schema of the settings file; every key optional, defaults applied after. */
export const sidecarSettingsSchema = {
  $schema: "https://json-schema.org/draft/2020-12/schema",
  type: "object",
  additionalProperties: false,
  properties: {
    image: { type: "string", minLength: 1 },
    imagePullPolicy: { enum: ["Always", "IfNotPresent", "Never"] },
    authorityUrl: { type: "string", pattern: "^https?://" },
    logLevel: { enum: ["fatal", "error", "warn", "info", "debug", "trace", "silent"] },
    listenHost: { enum: ["127.0.0.1", "0.0.0.0"] },
    ports: {
      type: "object",
      additionalProperties: false,
      properties: { grpc: port, proxy: port, metrics: port },
    },
    redis: {
      type: "object",
      additionalProperties: false,
      properties: { url: { type: "string", pattern: "^rediss?://" }, urlSecret: secretRef },
      oneOf: [{ required: ["url"] }, { required: ["urlSecret"] }],
    },
    cacheKeySecret: secretRef,
    credentialsSecret: {
      type: "object",
      additionalProperties: false,
      required: ["name", "clientIdKey", "clientSecretKey"],
      properties: {
        name: secretRef.properties.name,
        clientIdKey: secretRef.properties.key,
        clientSecretKey: secretRef.properties.key,
      },
    },
    idpTokenUrl: { type: "string", pattern: "^https?://" },
    issuer: { type: "string", minLength: 1 },
    jwksUrl: { type: "string", pattern: "^https?://" },
    audience: { type: "string", minLength: 1 },
    trustedIssuers: {
      type: "array",
      maxItems: 32,
      items: {
        type: "object",
        required: ["issuer"],
        properties: { issuer: { type: "string", pattern: "^https?://" } },
      },
    },
    capabilityMap: { type: "object", additionalProperties: { type: "string", minLength: 1 } },
    egressAllow: { type: "array", maxItems: 1024, items: { type: "string", minLength: 1, maxLength: 260 } },
    resources: {
      type: "object",
      additionalProperties: false,
      properties: { requests: resourceList, limits: resourceList },
    },
    istio: {
      type: "object",
      additionalProperties: false,
      properties: {
        mode: { enum: ["auto", "always", "never"] },
        excludeInboundPorts: { type: "boolean" },
      },
    },
    nativeSidecar: { type: "boolean" },
    prometheusAnnotations: { type: "boolean" },
    shutdownWaitMs: { type: "integer", minimum: 0, maximum: 600_000 },
  },
} as const;

const ajv = new Ajv2020({ allErrors: true, strict: true, strictRequired: false });
const validateRaw = ajv.compile(sidecarSettingsSchema);

type Raw = Record<string, unknown>;

const obj = (value: unknown): Raw =>
  typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Raw) : {};
const str = (value: unknown): string | undefined => (typeof value === "string" ? value : undefined);
const num = (value: unknown, fallback: number): number => (typeof value === "number" ? value : fallback);
const ref = (value: unknown): SecretKeyRef | undefined => {
  const o = obj(value);
  const name = str(o.name);
  const key = str(o.key);
  return name !== undefined && key !== undefined ? { name, key } : undefined;
};
const resourceListOf = (value: unknown): ResourceList | undefined => {
  if (value === undefined) return undefined;
  const o = obj(value);
  const cpu = str(o.cpu);
  const memory = str(o.memory);
  return { ...(cpu === undefined ? {} : { cpu }), ...(memory === undefined ? {} : { memory }) };
};

/** Each entry as the sidecar will parse it: a typo fails the injector, not every injected pod. */
function egressAllowOf(value: unknown): string[] {
  const entries = Array.isArray(value) ? (value as string[]) : [];
  entries.forEach((entry, index) => {
    try {
      egressAllowList(entry, `egressAllow[${index}]`);
    } catch (error) {
      if (error instanceof ConfigError)
        throw new InjectorSettingsError(`invalid sidecar settings: ${error.message}`);
      throw error;
    }
  });
  return entries.map((entry) => entry.trim());
}

export interface SettingsOverrides {
  /** From `--sidecar-image` / `AUTHORITY_SIDECAR_IMAGE`: wins over the file. */
  readonly image?: string | undefined;
  /** Used when neither the override nor the file names an image. */
  readonly version: string;
}

/**
 * Validates `raw` (the parsed settings file, or `{}` when there is none) and fills the
 * defaults of docs/configuration.md. Throws InjectorSettingsError listing every problem.
 */
export function parseSidecarSettings(raw: unknown, overrides: SettingsOverrides): SidecarSettings {
  const input = raw ?? {};
  if (!validateRaw(input)) {
    const problems = (validateRaw.errors ?? []).map(
      (e) => `${e.instancePath === "" ? "(root)" : e.instancePath} ${e.message ?? "is invalid"}`,
    );
    throw new InjectorSettingsError(`invalid sidecar settings: ${problems.join("; ")}`);
  }
  const o = obj(input);
  const ports = obj(o.ports);
  const redisRaw = o.redis === undefined ? undefined : obj(o.redis);
  const redisUrl = str(redisRaw?.url);
  const redisSecret = ref(redisRaw?.urlSecret);
  const redis =
    redisUrl !== undefined
      ? { url: redisUrl }
      : redisSecret !== undefined
        ? { urlSecret: redisSecret }
        : undefined;
  const cacheKeySecret = ref(o.cacheKeySecret);
  const credentialsRaw = o.credentialsSecret === undefined ? undefined : obj(o.credentialsSecret);
  const credentialsSecret =
    credentialsRaw === undefined
      ? undefined
      : {
          name: str(credentialsRaw.name) ?? "",
          clientIdKey: str(credentialsRaw.clientIdKey) ?? "",
          clientSecretKey: str(credentialsRaw.clientSecretKey) ?? "",
        };
  // A Redis cache without its MAC key would let whoever can write Redis forge verified policies.
  if (redis !== undefined && cacheKeySecret === undefined) {
    throw new InjectorSettingsError("invalid sidecar settings: cacheKeySecret is required when redis is set");
  }
  const portSettings = {
    grpc: num(ports.grpc, 9191),
    proxy: num(ports.proxy, DEFAULT_SIDECAR_PROXY_PORT),
    metrics: num(ports.metrics, 9464),
  };
  for (const [name, value] of Object.entries(portSettings)) {
    if (isIstioReservedPort(value)) {
      throw new InjectorSettingsError(
        `invalid sidecar settings: ${istioPortMessage(`ports.${name}`, value)}`,
      );
    }
  }
  if (new Set(Object.values(portSettings)).size !== 3) {
    throw new InjectorSettingsError(
      "invalid sidecar settings: ports.grpc, ports.proxy and ports.metrics must differ",
    );
  }
  const resources = obj(o.resources);
  const requests = resourceListOf(resources.requests);
  const limits = resourceListOf(resources.limits);
  const istio = obj(o.istio);
  const capabilityMap =
    o.capabilityMap === undefined ? undefined : (obj(o.capabilityMap) as Record<string, string>);
  const pullPolicy = str(o.imagePullPolicy);
  const egressAllow = egressAllowOf(o.egressAllow);
  return {
    image: overrides.image ?? str(o.image) ?? defaultSidecarImage(overrides.version),
    imagePullPolicy: pullPolicy === "Always" || pullPolicy === "Never" ? pullPolicy : "IfNotPresent",
    authorityUrl: str(o.authorityUrl) ?? "http://127.0.0.1:8080",
    logLevel: str(o.logLevel) ?? "info",
    listenHost: o.listenHost === "0.0.0.0" ? "0.0.0.0" : "127.0.0.1",
    ports: portSettings,
    redis,
    cacheKeySecret,
    credentialsSecret,
    idpTokenUrl: str(o.idpTokenUrl),
    issuer: str(o.issuer),
    jwksUrl: str(o.jwksUrl),
    audience: str(o.audience),
    trustedIssuers: Array.isArray(o.trustedIssuers)
      ? (o.trustedIssuers as Readonly<Record<string, unknown>>[])
      : undefined,
    capabilityMap,
    egressAllow,
    resources:
      o.resources === undefined
        ? defaultSidecarResources
        : {
            ...(requests === undefined ? {} : { requests }),
            ...(limits === undefined ? {} : { limits }),
          },
    istio: {
      mode: istio.mode === "always" || istio.mode === "never" ? istio.mode : "auto",
      excludeInboundPorts: istio.excludeInboundPorts !== false,
    },
    // The settings file cannot know the cluster's version; the chart renders it from there.
    nativeSidecar: o.nativeSidecar === true,
    prometheusAnnotations: o.prometheusAnnotations !== false,
    shutdownWaitMs: typeof o.shutdownWaitMs === "number" ? o.shutdownWaitMs : DEFAULT_SHUTDOWN_WAIT_MS,
  };
}
