/**
 * gRPC C-core as a test peer: grpc-core-client.py under a Python that has Debian's
 * python3-grpcio (`make test` installs it with scripts/ensure-test-peers.sh where it can).
 * C-core has its own HTTP/2 stack (chttp2: HPACK with a dynamic table, BDP pings, its own flow
 * control), so it checks the sidecar's HTTP/2 layer against code that shares nothing with
 * node:http2 / nghttp2, which grpc-js uses.
 *
 *   const peer = requireGrpcCore();            // throws, naming the package, when not installed
 *   const [answers] = await peer.run({ target, calls: [{ kind: "unary", method, request }] });
 */
import { spawn, spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";

export interface GrpcCoreCall {
  readonly kind: "unary" | "first-of-stream";
  readonly method: string;
  readonly request: Uint8Array;
  /** Sent at once, multiplexed on the one channel (default 1). */
  readonly repeat?: number;
  /** Seconds (default 10); null sends no deadline. */
  readonly timeout?: number | null;
  readonly metadata?: ReadonlyArray<readonly [string, string]>;
}

export interface GrpcCoreAnswer {
  readonly code: number;
  readonly details: string;
  readonly response?: Buffer;
}

export interface GrpcCoreRun {
  readonly target: string;
  readonly tls?: { readonly rootPem: string; readonly serverName: string };
  readonly calls: readonly GrpcCoreCall[];
}

export interface GrpcCorePeer {
  /** One channel, the calls in order; one answer list per call. */
  run(spec: GrpcCoreRun): Promise<GrpcCoreAnswer[][]>;
}

const SCRIPT = fileURLToPath(new URL("./grpc-core-client.py", import.meta.url));
const PYTHONS = ["/usr/bin/python3", "python3"];
const RUN_TIMEOUT_MS = 60_000;

/**
 * The peer. A missing peer fails the tests that need it (the suite skips nothing): `make test`
 * installs it, through scripts/ensure-test-peers.sh.
 */
export function requireGrpcCore(): GrpcCorePeer {
  const python = PYTHONS.find(
    (candidate) => spawnSync(candidate, ["-c", "import grpc"], { stdio: "ignore" }).status === 0,
  );
  if (python === undefined) {
    throw new Error(
      "gRPC C-core (Debian package python3-grpcio) is not installed: run scripts/ensure-test-peers.sh (make test does)",
    );
  }
  return { run: (spec) => runPeer(python, spec) };
}

function runPeer(python: string, spec: GrpcCoreRun): Promise<GrpcCoreAnswer[][]> {
  const input = JSON.stringify({
    target: spec.target,
    tls: spec.tls === undefined ? null : { root_pem: spec.tls.rootPem, server_name: spec.tls.serverName },
    calls: spec.calls.map((call) => ({ ...call, request: Buffer.from(call.request).toString("base64") })),
  });
  return new Promise((resolve, reject) => {
    const child = spawn(python, [SCRIPT], { stdio: ["pipe", "pipe", "pipe"], timeout: RUN_TIMEOUT_MS });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => {
      stdout += chunk.toString("utf8");
    });
    child.stderr.on("data", (chunk: Buffer) => {
      stderr = (stderr + chunk.toString("utf8")).slice(-4000);
    });
    child.on("error", reject);
    child.on("close", (code, signal) => {
      if (code !== 0) {
        reject(new Error(`grpc-core-client exited ${code ?? signal}: ${stderr}`));
        return;
      }
      const parsed = JSON.parse(stdout) as {
        results: Array<Array<{ code: number; details: string; response?: string }>>;
      };
      resolve(
        parsed.results.map((answers) =>
          answers.map(({ code, details, response }) => ({
            code,
            details,
            ...(response === undefined ? {} : { response: Buffer.from(response, "base64") }),
          })),
        ),
      );
    });
    child.stdin.end(input);
  });
}
