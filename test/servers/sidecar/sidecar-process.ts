import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { CAPABILITY, UPSTREAM_HOST, type World } from "./world.ts";

/** `authority sidecar` as a real process, started as a pod would start it, for the process-level tests. */

const repo = fileURLToPath(new URL("../../../", import.meta.url));

export interface SidecarProcess {
  readonly child: ChildProcess;
  readonly ports: { grpc: number; proxy: number; metrics: number };
  output(): string;
}

/** The environment of a sidecar of `world` on ephemeral ports; writes its token file into `dir`. */
export async function sidecarProcessEnv(
  world: World,
  dir: string,
  extra: Record<string, string> = {},
): Promise<Record<string, string>> {
  const tokenFile = join(dir, "sidecar-token");
  await writeFile(tokenFile, world.tokens.sidecar, { mode: 0o600 });
  return {
    PATH: process.env.PATH ?? "",
    AUTHORITY_URL: world.authorityUrl,
    AUTHORITY_ISSUER: world.context.config.issuer,
    AUTHORITY_AUDIENCE: "authority",
    AUTHORITY_SIDECAR_GRPC_LISTEN: "127.0.0.1:0",
    AUTHORITY_SIDECAR_PROXY_LISTEN: "127.0.0.1:0",
    AUTHORITY_SIDECAR_METRICS_LISTEN: "127.0.0.1:0",
    AUTHORITY_SIDECAR_TOKEN_FILE: tokenFile,
    AUTHORITY_SERVICE_IDENTITY: world.context.config.serviceIdentity,
    AUTHORITY_SIDECAR_CAPABILITY_MAP: JSON.stringify({ [UPSTREAM_HOST]: CAPABILITY }),
    AUTHORITY_SIDECAR_JOURNAL_DIR: join(dir, "journal"),
    AUTHORITY_LOG_LEVEL: "info",
    ...extra,
  };
}

/** Starts the CLI's sidecar; resolves with the ports its start-up log names. */
export async function startSidecarProcess(env: Record<string, string>): Promise<SidecarProcess> {
  const child = spawn(process.execPath, ["bin/authority.ts", "sidecar"], { cwd: repo, env });
  let output = "";
  const ports = await new Promise<SidecarProcess["ports"]>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no "sidecar listening" line:\n${output}`)), 60_000);
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      for (const line of output.split("\n")) {
        if (!line.includes('"sidecar listening"')) continue;
        const parsed = JSON.parse(line) as { grpcPort: number; proxyPort: number; metricsPort: number };
        clearTimeout(timer);
        resolve({ grpc: parsed.grpcPort, proxy: parsed.proxyPort, metrics: parsed.metricsPort });
      }
    };
    child.stdout?.on("data", onData);
    child.stderr?.on("data", (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`the sidecar exited (${String(code)}):\n${output}`));
    });
  });
  return { child, ports, output: () => output };
}

export async function stopSidecarProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.kill("SIGTERM");
  await exited;
}

/** The status of `/readyz`, or undefined when nothing answers. */
export async function readyzStatus(metricsPort: number): Promise<number | undefined> {
  const response = await fetch(`http://127.0.0.1:${metricsPort}/readyz`).catch(() => undefined);
  await response?.arrayBuffer();
  return response?.status;
}

/** Polls `/readyz` every 5 ms, as closely as a kubelet could (its period is ≥ 1 s). */
export async function untilReady(started: SidecarProcess): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    assert.equal(started.child.exitCode, null, started.output());
    if ((await readyzStatus(started.ports.metrics)) === 200) return;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  assert.fail(`never ready:\n${started.output()}`);
}
