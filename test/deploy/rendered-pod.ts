/**
 * The chart rendered by the real Helm, and one of its containers started the way the kubelet
 * would start it on a test machine: the container's environment exactly as rendered (its
 * ConfigMap's data through envFrom, then its literal `env` values; a `valueFrom` is resolved
 * from the Secrets the test says exist or the release renders), and every volume it mounts
 * materialised in a temp dir at the mount path's basename — emptyDirs and PVCs as directories,
 * Secret, projected and ConfigMap volumes with exactly the items the pod spec projects. Paths in the environment that point into a mount are rewritten
 * to the materialised directory; nothing else is changed or inherited.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdir, writeFile } from "node:fs/promises";
import { basename, join } from "node:path";
import { promisify } from "node:util";
import { parseAllDocuments } from "yaml";
import { projectTool } from "../helpers/peer-process.ts";
import { isObj, type Obj, repoPath } from "./helpers.ts";

const run = promisify(execFile);

export const KUBE_VERSION = "1.31.0";

/**
 * The values file with the chart's required values (image.repository, authority.issuer) and
 * nothing else: renderChart puts it first, so `-f` files and `--set`s given after it win.
 */
export const REQUIRED_VALUES_FILE = repoPath("charts/authority/ci/default-values.yaml");

/**
 * `helm template` of the chart with `--set`/`--set-json`/`-f` arguments after the required
 * values (`{ required: false }`: the arguments alone); every document.
 */
export async function renderChart(
  args: readonly string[],
  { required = true }: { readonly required?: boolean } = {},
): Promise<Obj[]> {
  const { stdout } = await run(
    projectTool("helm"),
    [
      "template",
      "authority",
      repoPath("charts/authority"),
      "-n",
      "authority-system",
      "--kube-version",
      KUBE_VERSION,
      ...(required ? ["-f", REQUIRED_VALUES_FILE] : []),
      ...args,
    ],
    { maxBuffer: 32 * 1024 * 1024, timeout: 60_000 },
  );
  return parseAllDocuments(stdout).flatMap((doc) => {
    assert.deepEqual(
      doc.errors.map((e) => e.message),
      [],
    );
    const value: unknown = doc.toJS();
    return isObj(value) ? [value] : [];
  });
}

/** The render's error output when Helm refuses the values (undefined when it renders). */
export async function renderError(
  args: readonly string[],
  options: { readonly required?: boolean } = {},
): Promise<string | undefined> {
  return renderChart(args, options).then(
    () => undefined,
    (error: { stderr?: string }) => error.stderr ?? String(error),
  );
}

export interface RenderedPod {
  readonly pod: Obj;
  readonly container: Obj;
}

export function deploymentPod(objects: readonly Obj[], name: string): RenderedPod {
  const found = objects.find((o) => o.kind === "Deployment" && isObj(o.metadata) && o.metadata.name === name);
  assert.ok(found !== undefined && isObj(found.spec) && isObj(found.spec.template), `Deployment ${name}`);
  const pod = found.spec.template.spec;
  assert.ok(isObj(pod));
  const container = (pod.containers as Obj[])[0];
  assert.ok(container !== undefined);
  return { pod, container };
}

export const envEntries = (container: Obj): Obj[] => (container.env ?? []) as Obj[];
export const volumes = (pod: Obj): Obj[] => (pod.volumes ?? []) as Obj[];
export const mounts = (container: Obj): Obj[] => (container.volumeMounts ?? []) as Obj[];

export function configMapData(objects: readonly Obj[], name: string): Record<string, string> {
  const map = objects.find((o) => o.kind === "ConfigMap" && isObj(o.metadata) && o.metadata.name === name);
  assert.ok(map !== undefined && isObj(map.data), `ConfigMap ${name}`);
  return map.data as Record<string, string>;
}

/** Secrets and ConfigMaps that exist in the namespace before the install: name → key → value. */
export interface ClusterObjects {
  readonly secrets?: Readonly<Record<string, Readonly<Record<string, string>>>>;
  readonly configMaps?: Readonly<Record<string, Readonly<Record<string, string>>>>;
}

export interface Kubelet {
  /** The container's environment, mount paths rewritten to their materialised directories. */
  readonly env: Record<string, string>;
  /** mountPath → the directory standing in for it. */
  readonly mounted: ReadonlyMap<string, string>;
}

/** A Secret the chart renders itself (generated credentials): name → key → decoded value. */
function renderedSecrets(objects: readonly Obj[]): Record<string, Record<string, string>> {
  const found: Record<string, Record<string, string>> = {};
  for (const o of objects) {
    if (o.kind !== "Secret" || !isObj(o.metadata) || !isObj(o.data)) continue;
    found[String(o.metadata.name)] = Object.fromEntries(
      Object.entries(o.data).map(([key, value]) => [
        key,
        Buffer.from(String(value), "base64").toString("utf8"),
      ]),
    );
  }
  return found;
}

function lookup(
  source: Readonly<Record<string, Readonly<Record<string, string>>>> | undefined,
  what: string,
  name: string,
  key: string,
): string {
  const value = source?.[name]?.[key];
  assert.ok(value !== undefined, `${what} ${name} has no key ${key} (the kubelet would not start the pod)`);
  return value;
}

/** What the kubelet gives the container: its mounted volumes (written under `dir`) and its environment. */
export async function asKubelet(
  objects: readonly Obj[],
  rendered: RenderedPod,
  cluster: ClusterObjects,
  dir: string,
): Promise<Kubelet> {
  const mounted = new Map<string, string>();
  // The cluster's Secrets, then those the release itself creates.
  const secrets = { ...renderedSecrets(objects), ...cluster.secrets };
  const project = async (
    target: string,
    what: string,
    name: string,
    from: Readonly<Record<string, Readonly<Record<string, string>>>> | undefined,
    items: Obj[],
    mode: number,
  ) => {
    assert.ok(items.length > 0, `${what} ${name} projects named items`);
    for (const item of items) {
      await writeFile(join(target, String(item.path)), lookup(from, what, name, String(item.key)), { mode });
    }
  };
  for (const mount of mounts(rendered.container)) {
    const volume = volumes(rendered.pod).find((v) => v.name === mount.name);
    assert.ok(volume !== undefined, `volume ${String(mount.name)} is declared by the pod`);
    const mountPath = String(mount.mountPath);
    const target = join(dir, basename(mountPath));
    assert.ok(![...mounted.values()].includes(target), `two mounts named ${basename(mountPath)}`);
    await mkdir(target, { recursive: true });
    if (isObj(volume.secret)) {
      const spec = volume.secret;
      const mode = Number(spec.defaultMode ?? 0o644);
      await project(target, "Secret", String(spec.secretName), secrets, (spec.items ?? []) as Obj[], mode);
    } else if (isObj(volume.configMap)) {
      const spec = volume.configMap;
      const mode = Number(spec.defaultMode ?? 0o644);
      await project(
        target,
        "ConfigMap",
        String(spec.name),
        cluster.configMaps,
        (spec.items ?? []) as Obj[],
        mode,
      );
    } else if (isObj(volume.projected)) {
      // Several Secrets joined in one directory, as the kubelet projects them.
      const mode = Number(volume.projected.defaultMode ?? 0o644);
      for (const source of (volume.projected.sources ?? []) as Obj[]) {
        assert.ok(isObj(source.secret), `volume ${String(volume.name)}: only Secret sources here`);
        const items = (source.secret.items ?? []) as Obj[];
        await project(target, "Secret", String(source.secret.name), secrets, items, mode);
      }
    } else {
      // emptyDir, or a PersistentVolumeClaim: a directory that outlives the process (kept in `dir`).
      assert.ok(
        isObj(volume.emptyDir) || isObj(volume.persistentVolumeClaim),
        `volume ${String(volume.name)}: only emptyDir, PVC, Secret, projected and ConfigMap here`,
      );
    }
    mounted.set(mountPath, target);
  }
  // One pass over every mount path (the longest first, so that /a/b is not taken for /a), each
  // only where a path starts — at the start of the value or after `:`, `=` or `,` (a URL such
  // as sqlite:/var/lib/authority/authority.db) — and ends.
  const escapeRegExp = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const paths = [...mounted.keys()].sort((a, b) => b.length - a.length);
  const pattern = new RegExp(`(?<=^|[:=,])(${paths.map(escapeRegExp).join("|")})(?=/|$)`, "g");
  const inMount = (value: string): string =>
    paths.length === 0 ? value : value.replace(pattern, (path) => mounted.get(path) ?? path);
  const env: Record<string, string> = {};
  for (const from of (rendered.container.envFrom ?? []) as Obj[]) {
    assert.ok(isObj(from.configMapRef), "envFrom: only ConfigMaps of the release here");
    Object.assign(env, configMapData(objects, String(from.configMapRef.name)));
  }
  for (const entry of envEntries(rendered.container)) {
    const name = String(entry.name);
    if (typeof entry.value === "string") env[name] = entry.value;
    else {
      const ref = isObj(entry.valueFrom) ? entry.valueFrom.secretKeyRef : undefined;
      assert.ok(isObj(ref), `env ${name}: a value or a secretKeyRef`);
      env[name] = lookup(secrets, "Secret", String(ref.name), String(ref.key));
    }
  }
  for (const [name, value] of Object.entries(env)) env[name] = inMount(value);
  return { env, mounted };
}
