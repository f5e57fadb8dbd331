/**
 * A real `authority sidecar` process (the CLI, its composition root, its process guard) on
 * ephemeral ports, run as a peer process (it cannot outlive the test process).
 *
 *   const sidecar = await startSidecarProcess({ AUTHORITY_URL: …, … });
 *   await sidecar.untilReady();
 *   sidecar.ports.proxy; await sidecar.peer.kill();   // SIGKILL
 */
import { fileURLToPath } from "node:url";
import { type PeerProcess, startPeerProcess } from "./peer-process.ts";

export interface SidecarProcess {
  readonly peer: PeerProcess;
  readonly ports: { readonly grpc: number; readonly proxy: number; readonly metrics: number };
  /** Polls `/readyz` until 200 (fails when the process exits or after `timeoutMs`). */
  untilReady(timeoutMs?: number): Promise<void>;
  /** Whether the process still answers `/healthz` with 200. */
  healthy(): Promise<boolean>;
}

const repo = fileURLToPath(new URL("../../", import.meta.url));

/**
 * Starts the sidecar with this environment (listen addresses default to ephemeral ports), as
 * `node bin/authority.ts sidecar` unless another command (relative to the repository) is given.
 */
export async function startSidecarProcess(
  env: Readonly<Record<string, string>>,
  start: { readonly command: string; readonly args: readonly string[] } = {
    command: process.execPath,
    args: ["bin/authority.ts", "sidecar"],
  },
): Promise<SidecarProcess> {
  const peer = startPeerProcess({
    command: start.command,
    args: [...start.args],
    cwd: repo,
    env: {
      PATH: process.env.PATH ?? "",
      AUTHORITY_SIDECAR_GRPC_LISTEN: "127.0.0.1:0",
      AUTHORITY_SIDECAR_PROXY_LISTEN: "127.0.0.1:0",
      AUTHORITY_SIDECAR_METRICS_LISTEN: "127.0.0.1:0",
      AUTHORITY_LOG_LEVEL: "info",
      ...env,
    },
  });
  const deadline = Date.now() + 60_000;
  let ports: SidecarProcess["ports"] | undefined;
  while (ports === undefined) {
    for (const line of peer.output().split("\n")) {
      if (!line.includes('"sidecar listening"')) continue;
      const parsed = JSON.parse(line) as { grpcPort: number; proxyPort: number; metricsPort: number };
      ports = { grpc: parsed.grpcPort, proxy: parsed.proxyPort, metrics: parsed.metricsPort };
    }
    if (ports !== undefined) break;
    if (!peer.running || Date.now() > deadline) {
      await peer.kill();
      throw new Error(`the sidecar did not start:\n${peer.output()}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  const status = async (path: string): Promise<number> => {
    const response = await fetch(`http://127.0.0.1:${ports.metrics}${path}`).catch(() => undefined);
    await response?.arrayBuffer();
    return response?.status ?? 0;
  };
  return {
    peer,
    ports,
    async untilReady(timeoutMs = 60_000) {
      const until = Date.now() + timeoutMs;
      while (Date.now() < until) {
        if (!peer.running) throw new Error(`the sidecar exited:\n${peer.output()}`);
        if ((await status("/readyz")) === 200) return;
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
      throw new Error(`the sidecar never became ready:\n${peer.output()}`);
    },
    healthy: async () => peer.running && (await status("/healthz")) === 200,
  };
}
