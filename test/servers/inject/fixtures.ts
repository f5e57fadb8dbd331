import { readFileSync } from "node:fs";
import { Pod } from "kubernetes-models/v1";
import { parseSidecarSettings, type SidecarSettings } from "../../../src/servers/inject/settings.ts";

export const fixtureNames = [
  "plain-pod",
  "already-injected-pod",
  "opt-out-pod",
  "istio-injected-pod",
  "bare-pod",
  "deployment",
] as const;
export type FixtureName = (typeof fixtureNames)[number];

export interface AdmissionReviewFixture {
  apiVersion: string;
  kind: string;
  request: { uid: string; object: Record<string, unknown>; [key: string]: unknown };
}

export function loadReview(name: FixtureName): AdmissionReviewFixture {
  const url = new URL(`../../fixtures/admission/${name}.json`, import.meta.url);
  return JSON.parse(readFileSync(url, "utf8")) as AdmissionReviewFixture;
}

export const loadPod = (name: FixtureName): Record<string, unknown> => loadReview(name).request.object;

/** Settings as the chart renders them with bundled Redis (URL in a Secret) and a cache key. */
export const chartLikeSettings: SidecarSettings = parseSidecarSettings(
  {
    image: "ghcr.io/authority/authority:0.1.0",
    authorityUrl: "http://authority.authority-system.svc.cluster.local:8080",
    redis: { urlSecret: { name: "authority-redis-url", key: "url" } },
    cacheKeySecret: { name: "authority-sidecar-cache-key", key: "cache-key" },
    issuer: "https://idp.example.com",
    audience: "authority",
    capabilityMap: { "api.partner.example": "cap_default", "/v1/orders": "cap_orders" },
  },
  { version: "0.1.0" },
);

/** Validates with the Kubernetes OpenAPI schema (throws on a violation). */
export function validatePod(obj: Record<string, unknown>): void {
  new Pod(obj as ConstructorParameters<typeof Pod>[0]).validate();
}

type Obj = Record<string, unknown>;
const list = (v: unknown): Obj[] => (Array.isArray(v) ? (v as Obj[]) : []);
const asObj = (v: unknown): Obj => (typeof v === "object" && v !== null ? (v as Obj) : {});

export const containersOf = (pod: Obj): Obj[] => list(asObj(pod.spec).containers);
export const initContainersOf = (pod: Obj): Obj[] => list(asObj(pod.spec).initContainers);
export const volumesOf = (pod: Obj): Obj[] => list(asObj(pod.spec).volumes);
export const annotationsOf = (pod: Obj): Record<string, string> =>
  asObj(asObj(pod.metadata).annotations) as Record<string, string>;
export const containerNamed = (pod: Obj, name: string): Obj | undefined =>
  containersOf(pod).find((c) => c.name === name);

/** What the schema does not check but the API server does: names unique, mounts resolve. */
export function checkPodConsistency(pod: Obj): void {
  const containers = [...containersOf(pod), ...initContainersOf(pod)];
  const names = containers.map((c) => c.name);
  if (new Set(names).size !== names.length) throw new Error(`duplicate container names: ${names.join(",")}`);
  const volumeNames = volumesOf(pod).map((v) => v.name);
  if (new Set(volumeNames).size !== volumeNames.length) throw new Error("duplicate volume names");
  for (const c of containers) {
    for (const m of list(c.volumeMounts)) {
      if (!volumeNames.includes(m.name))
        throw new Error(`container ${String(c.name)} mounts unknown ${String(m.name)}`);
    }
    const portNames = list(c.ports).map((p) => p.name);
    for (const n of portNames) {
      if (typeof n === "string" && (n.length > 15 || !/^[a-z0-9]([a-z0-9-]*[a-z0-9])?$/.test(n))) {
        throw new Error(`invalid port name ${n}`);
      }
    }
  }
}
