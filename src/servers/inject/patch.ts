import { cacheKeyMountPath, type SidecarSettings } from "./settings.ts";

/**
 * The pure part of the injector: given a Pod (as the API server sends it in an
 * AdmissionReview) and the settings, the RFC 6902 operations that add the sidecar.
 * No I/O, so every case is unit-tested on real AdmissionReview shapes.
 */

export type JsonPatchOperation =
  | { readonly op: "add" | "replace" | "test"; readonly path: string; readonly value: unknown }
  | { readonly op: "remove"; readonly path: string }
  | { readonly op: "move" | "copy"; readonly from: string; readonly path: string };

export const sidecarContainerName = "authority-sidecar";
export const statusAnnotation = "authority.io/status";
/** Label (selects the pod in the webhook's objectSelector) and annotation (`"false"` opts out). */
export const injectKey = "authority.io/inject";
/** Per-pod JSON object `{ "<host or route prefix>": "<capability_id>" }` for the forward proxy. */
export const capabilityMapAnnotation = "authority.io/capability-map";
export const istioStatusAnnotation = "sidecar.istio.io/status";
export const istioExcludeInboundAnnotation = "traffic.sidecar.istio.io/excludeInboundPorts";
export const istioProxyContainerName = "istio-proxy";

const tmpVolumeName = "authority-sidecar-tmp";
const cacheKeyVolumeName = "authority-cache-key";
/** Readable by the sidecar's non-root user without touching the pod's fsGroup. */
const cacheKeyFileMode = 0o444;

export type PodLike = Readonly<Record<string, unknown>>;
type Obj = Readonly<Record<string, unknown>>;

export type SkipReason = "already_injected" | "opted_out";

export interface InjectionPlan {
  /** Empty when the pod is skipped: a second pass over a patched pod adds nothing. */
  readonly patch: JsonPatchOperation[];
  readonly skipped: SkipReason | undefined;
  /** Sent back as AdmissionResponse.warnings (shown by kubectl); never block the pod. */
  readonly warnings: string[];
  readonly istio: boolean;
}

/** A pod annotation the injector must read is malformed: the pod is refused with this message. */
export class PodAnnotationError extends Error {
  readonly code = "invalid_pod_annotation";
  constructor(message: string) {
    super(message);
    this.name = "PodAnnotationError";
  }
}

const isObj = (value: unknown): value is Obj =>
  typeof value === "object" && value !== null && !Array.isArray(value);
const objAt = (value: unknown, key: string): Obj | undefined => {
  if (!isObj(value)) return undefined;
  const child = value[key];
  return isObj(child) ? child : undefined;
};
const arrayAt = (value: unknown, key: string): readonly unknown[] | undefined => {
  if (!isObj(value)) return undefined;
  const child = value[key];
  return Array.isArray(child) ? child : undefined;
};
const stringAt = (value: Obj | undefined, key: string): string | undefined => {
  const child = value?.[key];
  return typeof child === "string" ? child : undefined;
};
const containerNames = (containers: readonly unknown[] | undefined): string[] =>
  (containers ?? []).flatMap((c) => {
    const name = isObj(c) ? c.name : undefined;
    return typeof name === "string" ? [name] : [];
  });

/** RFC 6901: `~` then `/` (in that order, so `~1` from a `/` is not re-escaped). */
export function escapeJsonPointer(token: string): string {
  return token.replaceAll("~", "~0").replaceAll("/", "~1");
}

function skipReason(pod: PodLike): SkipReason | undefined {
  const annotations = objAt(pod.metadata, "annotations");
  if (stringAt(annotations, statusAnnotation) === "injected") return "already_injected";
  const spec = objAt(pod, "spec");
  const names = [
    ...containerNames(arrayAt(spec, "containers")),
    ...containerNames(arrayAt(spec, "initContainers")),
  ];
  if (names.includes(sidecarContainerName)) return "already_injected";
  if (stringAt(annotations, injectKey)?.toLowerCase() === "false") return "opted_out";
  return undefined;
}

/**
 * What the injector knows about the pod's namespace. The AdmissionReview carries no namespace
 * labels: the chart registers one webhook per Istio namespace-label case, each calling its own
 * path (docs/decisions/0901-istio-detection-by-webhook-selector.md).
 */
export interface NamespaceContext {
  /** The namespace is labelled for Istio injection (`istio-injection=enabled` or `istio.io/rev`). */
  readonly istioInjection: boolean;
}

const noNamespaceSignal: NamespaceContext = { istioInjection: false };

/**
 * Whether Istio's proxy is (or is about to be) in this pod: the pod's own signs first (a pod
 * can opt out of a labelled namespace with `sidecar.istio.io/inject: "false"`), then the
 * namespace's labels, so the answer does not depend on which webhook runs first.
 */
export function podUsesIstio(
  pod: PodLike,
  mode: SidecarSettings["istio"]["mode"],
  namespace: NamespaceContext = noNamespaceSignal,
): boolean {
  if (mode !== "auto") return mode === "always";
  const metadata = objAt(pod, "metadata");
  const annotations = objAt(metadata, "annotations");
  const labels = objAt(metadata, "labels");
  if (stringAt(annotations, istioStatusAnnotation) !== undefined) return true;
  const spec = objAt(pod, "spec");
  const names = [
    ...containerNames(arrayAt(spec, "containers")),
    ...containerNames(arrayAt(spec, "initContainers")),
  ];
  if (names.includes(istioProxyContainerName)) return true;
  const istioInject =
    stringAt(labels, "sidecar.istio.io/inject") ?? stringAt(annotations, "sidecar.istio.io/inject");
  if (istioInject !== undefined) return istioInject.toLowerCase() === "true";
  return stringAt(labels, "istio.io/rev") !== undefined || namespace.istioInjection;
}

function podCapabilityMap(pod: PodLike): Record<string, string> | undefined {
  const raw = stringAt(objAt(objAt(pod, "metadata"), "annotations"), capabilityMapAnnotation);
  if (raw === undefined) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    throw new PodAnnotationError(`annotation ${capabilityMapAnnotation} is not valid JSON`);
  }
  if (!isObj(parsed) || !Object.values(parsed).every((v) => typeof v === "string" && v.length > 0)) {
    throw new PodAnnotationError(
      `annotation ${capabilityMapAnnotation} must be a JSON object of non-empty capability_id strings`,
    );
  }
  return parsed as Record<string, string>;
}

interface EnvVar {
  readonly name: string;
  readonly value?: string;
  readonly valueFrom?: { readonly secretKeyRef: { readonly name: string; readonly key: string } };
}

export const SIDECAR_NODE_OPTIONS = "--max-semi-space-size=2 --max-old-space-size=128";
/**
 * glibc maps an allocation of 32 KiB or more that no freed chunk can hold, instead of growing its
 * arena, and unmaps it when freed: V8's compiler zones grow in 32 KiB segments, and the arena
 * otherwise keeps their peaks (≈ 18 MB under load) resident for good (decision 3041). A lower
 * threshold changes nothing more; 64 KiB misses the segments.
 */
export const SIDECAR_GLIBC_TUNABLES = "glibc.malloc.mmap_threshold=32768";
/**
 * The image's sidecar command (WORKDIR /app): Node started straight from the sidecar's start-up
 * snapshot, one bootstrap, falling back to `node bin/authority.ts sidecar` when the image has no
 * snapshot for its Node or its sources changed (decision 2951).
 */
export const SIDECAR_COMMAND: readonly string[] = ["/app/bin/authority-sidecar"];

function sidecarEnv(settings: SidecarSettings, capabilityMap: Record<string, string> | undefined): EnvVar[] {
  const env: EnvVar[] = [
    { name: "AUTHORITY_LOG_LEVEL", value: settings.logLevel },
    // The root filesystem is read-only; embedded state (if any) goes to the writable emptyDir.
    { name: "AUTHORITY_STATE_DIR", value: "/tmp/authority" },
    { name: "AUTHORITY_URL", value: settings.authorityUrl },
    { name: "AUTHORITY_SIDECAR_GRPC_LISTEN", value: `${settings.listenHost}:${settings.ports.grpc}` },
    { name: "AUTHORITY_SIDECAR_PROXY_LISTEN", value: `${settings.listenHost}:${settings.ports.proxy}` },
    // Kubelet probes and Prometheus reach the pod IP, so metrics always listen on every address.
    { name: "AUTHORITY_SIDECAR_METRICS_LISTEN", value: `0.0.0.0:${settings.ports.metrics}` },
    // A 2 MB young generation and a bounded old space keep the sidecar's RSS under load small
    // (docs/sidecar.md, Memory); two malloc arenas stop per-thread arena growth, and compiler
    // zones' segments are mapped and unmapped instead of kept in them.
    { name: "NODE_OPTIONS", value: SIDECAR_NODE_OPTIONS },
    { name: "MALLOC_ARENA_MAX", value: "2" },
    { name: "GLIBC_TUNABLES", value: SIDECAR_GLIBC_TUNABLES },
    { name: "AUTHORITY_SIDECAR_SHUTDOWN_WAIT_MS", value: String(settings.shutdownWaitMs) },
  ];
  if (settings.redis?.url !== undefined) env.push({ name: "AUTHORITY_REDIS_URL", value: settings.redis.url });
  if (settings.redis?.urlSecret !== undefined) {
    env.push({ name: "AUTHORITY_REDIS_URL", valueFrom: { secretKeyRef: { ...settings.redis.urlSecret } } });
  }
  if (settings.cacheKeySecret !== undefined) {
    env.push({
      name: "AUTHORITY_SIDECAR_CACHE_KEY_FILE",
      value: `${cacheKeyMountPath}/${settings.cacheKeySecret.key}`,
    });
  }
  if (capabilityMap !== undefined) {
    env.push({ name: "AUTHORITY_SIDECAR_CAPABILITY_MAP", value: JSON.stringify(capabilityMap) });
  }
  // The workload credential: from the namespace's Secret, never a value in the pod spec.
  const credentials = settings.credentialsSecret;
  if (credentials !== undefined) {
    env.push(
      {
        name: "AUTHORITY_CLIENT_ID",
        valueFrom: { secretKeyRef: { name: credentials.name, key: credentials.clientIdKey } },
      },
      {
        name: "AUTHORITY_CLIENT_SECRET",
        valueFrom: { secretKeyRef: { name: credentials.name, key: credentials.clientSecretKey } },
      },
    );
  }
  if (settings.idpTokenUrl !== undefined)
    env.push({ name: "AUTHORITY_IDP_TOKEN_URL", value: settings.idpTokenUrl });
  if (settings.issuer !== undefined) env.push({ name: "AUTHORITY_ISSUER", value: settings.issuer });
  if (settings.jwksUrl !== undefined) env.push({ name: "AUTHORITY_JWKS_URL", value: settings.jwksUrl });
  if (settings.audience !== undefined) env.push({ name: "AUTHORITY_AUDIENCE", value: settings.audience });
  if (settings.egressAllow.length > 0) {
    env.push({ name: "AUTHORITY_EGRESS_ALLOW", value: settings.egressAllow.join(",") });
  }
  if (settings.trustedIssuers !== undefined && settings.trustedIssuers.length > 0) {
    env.push({ name: "AUTHORITY_TRUSTED_ISSUERS", value: JSON.stringify(settings.trustedIssuers) });
  }
  return env;
}

/** The container the injector adds; also used verbatim by the hand-written manifests' tests. */
export function sidecarContainer(
  settings: SidecarSettings,
  options: {
    readonly capabilityMap?: Record<string, string> | undefined;
    /** Istio is (or will be) in the pod: see the native-sidecar comment below. */
    readonly istio?: boolean | undefined;
  },
): Record<string, unknown> {
  const volumeMounts: Record<string, unknown>[] = [{ name: tmpVolumeName, mountPath: "/tmp" }];
  if (settings.cacheKeySecret !== undefined) {
    volumeMounts.push({ name: cacheKeyVolumeName, mountPath: cacheKeyMountPath, readOnly: true });
  }
  const probe = (path: string, periodSeconds: number, failureThreshold: number) => ({
    httpGet: { path, port: settings.ports.metrics, scheme: "HTTP" },
    periodSeconds,
    timeoutSeconds: 2,
    failureThreshold,
  });
  return {
    name: sidecarContainerName,
    image: settings.image,
    imagePullPolicy: settings.imagePullPolicy,
    command: [...SIDECAR_COMMAND],
    ports: [
      { name: "authz-grpc", containerPort: settings.ports.grpc, protocol: "TCP" },
      { name: "authz-proxy", containerPort: settings.ports.proxy, protocol: "TCP" },
      { name: "authz-metrics", containerPort: settings.ports.metrics, protocol: "TCP" },
    ],
    env: sidecarEnv(settings, options.capabilityMap),
    ...(settings.nativeSidecar ? { restartPolicy: "Always" } : {}),
    // A native sidecar with a startup probe holds the app's containers until it is ready to
    // decide (up to 5 minutes). Not beside Istio: when istio-proxy is a regular container,
    // iptables already sends the sidecar's calls to the authority to an istio-proxy that has
    // not started yet, and the pod would wait forever (decision 0901).
    ...(settings.nativeSidecar && options.istio !== true
      ? { startupProbe: { ...probe("/readyz", 1, 300), timeoutSeconds: 1 } }
      : {}),
    readinessProbe: { ...probe("/readyz", 5, 3), initialDelaySeconds: 1 },
    livenessProbe: { ...probe("/healthz", 10, 6), initialDelaySeconds: 5 },
    resources: settings.resources,
    securityContext: {
      runAsNonRoot: true,
      runAsUser: 10001,
      runAsGroup: 10001,
      readOnlyRootFilesystem: true,
      allowPrivilegeEscalation: false,
      privileged: false,
      capabilities: { drop: ["ALL"] },
      seccompProfile: { type: "RuntimeDefault" },
    },
    volumeMounts,
  };
}

export function sidecarVolumes(settings: SidecarSettings): Record<string, unknown>[] {
  const volumes: Record<string, unknown>[] = [{ name: tmpVolumeName, emptyDir: { sizeLimit: "64Mi" } }];
  if (settings.cacheKeySecret !== undefined) {
    volumes.push({
      name: cacheKeyVolumeName,
      secret: {
        secretName: settings.cacheKeySecret.name,
        items: [{ key: settings.cacheKeySecret.key, path: settings.cacheKeySecret.key }],
        defaultMode: cacheKeyFileMode,
        optional: false,
      },
    });
  }
  return volumes;
}

function mergePortList(existing: string | undefined, ports: readonly number[]): string {
  const list = (existing ?? "")
    .split(",")
    .map((p) => p.trim())
    .filter((p) => p.length > 0);
  for (const p of ports) if (!list.includes(String(p))) list.push(String(p));
  return list.join(",");
}

function desiredAnnotations(pod: PodLike, settings: SidecarSettings, istio: boolean): Record<string, string> {
  const existing = objAt(objAt(pod, "metadata"), "annotations");
  const wanted: Record<string, string> = { [statusAnnotation]: "injected" };
  // An app that already configured its own scrape keeps it; Istio's metrics merge reads these too.
  if (settings.prometheusAnnotations && stringAt(existing, "prometheus.io/scrape") === undefined) {
    wanted["prometheus.io/scrape"] = "true";
    wanted["prometheus.io/port"] = String(settings.ports.metrics);
    wanted["prometheus.io/path"] = "/metrics";
  }
  if (istio && settings.istio.excludeInboundPorts) {
    const current = stringAt(existing, istioExcludeInboundAnnotation);
    const merged = mergePortList(current, [settings.ports.grpc, settings.ports.metrics]);
    if (merged !== current) wanted[istioExcludeInboundAnnotation] = merged;
  }
  return wanted;
}

function appendOps(parent: string, existing: readonly unknown[] | undefined, items: readonly unknown[]) {
  if (existing === undefined) return [{ op: "add" as const, path: parent, value: [...items] }];
  return items.map((value) => ({ op: "add" as const, path: `${parent}/-`, value }));
}

function portWarnings(pod: PodLike, ports: readonly number[]): string[] {
  const warnings: string[] = [];
  for (const c of arrayAt(objAt(pod, "spec"), "containers") ?? []) {
    for (const p of arrayAt(c, "ports") ?? []) {
      const n = isObj(p) ? p.containerPort : undefined;
      if (typeof n === "number" && ports.includes(n)) {
        const name = isObj(c) && typeof c.name === "string" ? c.name : "?";
        warnings.push(
          `container ${name} declares port ${n}, which the ${sidecarContainerName} also listens on`,
        );
      }
    }
  }
  return warnings;
}

/** Kubernetes' default terminationGracePeriodSeconds. */
const KUBERNETES_DEFAULT_GRACE_SECONDS = 30;
/** The sidecar's shutdown after its drain: the servers' grace, then the decision records' flush (10 s each). */
const SIDECAR_SHUTDOWN_AFTER_DRAIN_SECONDS = 25;

/**
 * Raises the pod's terminationGracePeriodSeconds to what the sidecar's shutdown needs (drain +
 * grace + flush), so the kubelet does not kill it mid-drain; a longer one is kept.
 */
function terminationGraceOp(
  spec: Record<string, unknown> | undefined,
  settings: SidecarSettings,
): JsonPatchOperation | undefined {
  const needed = Math.ceil(settings.shutdownWaitMs / 1000) + SIDECAR_SHUTDOWN_AFTER_DRAIN_SECONDS;
  const current = spec?.terminationGracePeriodSeconds;
  const effective = typeof current === "number" ? current : KUBERNETES_DEFAULT_GRACE_SECONDS;
  if (spec === undefined || effective >= needed) return undefined;
  return { op: "add", path: "/spec/terminationGracePeriodSeconds", value: needed };
}

/** Decides and builds the patch; throws PodAnnotationError for a malformed Authority annotation. */
export function planInjection(
  pod: PodLike,
  settings: SidecarSettings,
  namespace: NamespaceContext = noNamespaceSignal,
): InjectionPlan {
  const istio = podUsesIstio(pod, settings.istio.mode, namespace);
  const skipped = skipReason(pod);
  if (skipped !== undefined) return { patch: [], skipped, warnings: [], istio };

  const annotationMap = podCapabilityMap(pod);
  const capabilityMap =
    annotationMap === undefined && settings.capabilityMap === undefined
      ? undefined
      : { ...settings.capabilityMap, ...annotationMap };
  const container = sidecarContainer(settings, { capabilityMap, istio });

  const spec = objAt(pod, "spec");
  const patch: JsonPatchOperation[] = [];
  if (spec === undefined) {
    patch.push({
      op: "add",
      path: "/spec",
      value: settings.nativeSidecar
        ? { initContainers: [container], containers: [], volumes: sidecarVolumes(settings) }
        : { containers: [container], volumes: sidecarVolumes(settings) },
    });
  } else {
    // Native: appended, so it starts after Istio's init containers (whichever webhook ran
    // first, Istio puts its own at the front) and can reach the authority through the mesh.
    const list = settings.nativeSidecar ? "initContainers" : "containers";
    patch.push(...appendOps(`/spec/${list}`, arrayAt(spec, list), [container]));
    patch.push(...appendOps("/spec/volumes", arrayAt(spec, "volumes"), sidecarVolumes(settings)));
  }

  const grace = terminationGraceOp(spec, settings);
  if (grace !== undefined) patch.push(grace);

  const annotations = desiredAnnotations(pod, settings, istio);
  const metadata = objAt(pod, "metadata");
  if (metadata === undefined) {
    patch.push({ op: "add", path: "/metadata", value: { annotations } });
  } else if (objAt(metadata, "annotations") === undefined) {
    patch.push({ op: "add", path: "/metadata/annotations", value: annotations });
  } else {
    for (const [key, value] of Object.entries(annotations)) {
      patch.push({ op: "add", path: `/metadata/annotations/${escapeJsonPointer(key)}`, value });
    }
  }
  const warnings = portWarnings(pod, [settings.ports.grpc, settings.ports.proxy, settings.ports.metrics]);
  return { patch, skipped: undefined, warnings, istio };
}

/** The RFC 6902 operations that add the sidecar, or `[]` when the pod is skipped. */
export function buildSidecarPatch(
  pod: PodLike,
  settings: SidecarSettings,
  namespace: NamespaceContext = noNamespaceSignal,
): JsonPatchOperation[] {
  return planInjection(pod, settings, namespace).patch;
}
