/**
 * The ports Istio's sidecar (istio-proxy / pilot-agent) binds inside every pod it injects.
 * A process sharing the pod's network namespace that binds one of them makes Istio's proxy
 * (or itself) fail to start, so the sidecar and the injector refuse them in every mode.
 * Source: https://istio.io/latest/docs/ops/deployment/application-requirements/#ports-used-by-istio
 */
export const ISTIO_RESERVED_PORTS: readonly number[] = [
  15000, 15001, 15004, 15006, 15008, 15009, 15020, 15021, 15053, 15090,
];

/** The sidecar's forward-proxy default: outside Istio's 150xx range (DESIGN §7). */
export const DEFAULT_SIDECAR_PROXY_PORT = 15101;

export function isIstioReservedPort(port: number): boolean {
  return ISTIO_RESERVED_PORTS.includes(port);
}

/** The message for a setting that names one of Istio's ports; `setting` is how the user set it. */
export function istioPortMessage(setting: string, port: number): string {
  return `${setting} uses port ${port}, which Istio's sidecar owns (Istio reserves ${ISTIO_RESERVED_PORTS.join(", ")}); choose another port`;
}
