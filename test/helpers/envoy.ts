/**
 * A real Envoy (the binary scripts/ensure-test-peers.sh installs into .tools/bin/envoy) for
 * tests: validate a bootstrap, or run one rendered from deploy/envoy/envoy.yaml with its ports
 * pointed at the test's sidecar and upstream.
 *
 *   const envoy = await startEnvoy(renderBootstrap({ sidecarPort, appPort }));
 *   envoy.url                 // http://127.0.0.1:<listener port>
 *   await envoy.accessLog()   // the JSON lines of its access log
 *   await envoy.stop();
 */
import { execFile } from "node:child_process";
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import { parse, stringify } from "yaml";
import { type PeerProcess, projectTool, startPeerProcess } from "./peer-process.ts";
import { makeTempDir, type TempDir } from "./temp-dir.ts";

const run = promisify(execFile);

// biome-ignore lint/suspicious/noExplicitAny: an Envoy bootstrap is walked and edited field by field
type Yaml = any;

/** `envoy --mode validate`: resolves to Envoy's verdict ("… OK" or its error) and whether it passed. */
export async function validateBootstrap(config: string): Promise<{ ok: boolean; output: string }> {
  const dir = await makeTempDir("envoy-validate-");
  try {
    const file = join(dir.path, "envoy.yaml");
    await writeFile(file, config);
    const result = await run(
      projectTool("envoy"),
      ["--mode", "validate", "-c", file, "--log-level", "error", "--disable-hot-restart"],
      { timeout: 60_000 },
    ).then(
      ({ stdout, stderr }) => ({ ok: true, output: stdout + stderr }),
      (error: { stdout?: string; stderr?: string }) => ({
        ok: false,
        output: `${error.stdout ?? ""}${error.stderr ?? String(error)}`,
      }),
    );
    return result;
  } finally {
    await dir.cleanup();
  }
}

export interface RenderOptions {
  /** The bootstrap to render (default: deploy/envoy/envoy.yaml as shipped). */
  readonly bootstrap?: string;
  /** The sidecar's ext_authz gRPC port (the authority_sidecar cluster). */
  readonly sidecarPort: number;
  /** The app the routes forward to (the local_app cluster). */
  readonly appPort: number;
  /** context_extensions.capability_id of every ext_authz-checked route. */
  readonly capability: string;
  /** The ext_authz filter's timeout (deploy/envoy/envoy.yaml: 0.25s). */
  readonly timeout?: string;
  /** Uncomments the shipped `with_request_body` block. */
  readonly withRequestBody?: boolean;
  /**
   * Adds a route `/no-capability` checked with no context_extensions (the sidecar then picks
   * the capability by host, or denies 400 missing_capability).
   */
  readonly routeWithoutCapability?: boolean;
  /** Path of a JSON access log with the ext_authz dynamic metadata. */
  readonly accessLogPath?: string;
}

/** The JSON access-log format: what the tests read back, and what docs/sidecar.md shows. */
export const ACCESS_LOG_FORMAT = {
  status: "%RESPONSE_CODE%",
  path: "%REQ(:PATH)%",
  flags: "%RESPONSE_FLAGS%",
  details: "%RESPONSE_CODE_DETAILS%",
  request_id: "%REQ(X-REQUEST-ID)%",
  authority: "%DYNAMIC_METADATA(envoy.filters.http.ext_authz)%",
};

/**
 * A shipped bootstrap (deploy/envoy/envoy.yaml unless `bootstrap` is given) with only what a
 * test must change: free ports (listener and admin on 0, clusters at the test's servers), the
 * routes' capability, and optionally the body and an access log. Everything else (filters,
 * fail-closed settings, timeouts) stays.
 */
export async function renderBootstrap(options: RenderOptions): Promise<string> {
  const text =
    options.bootstrap ?? (await readFile(new URL("../../deploy/envoy/envoy.yaml", import.meta.url), "utf8"));
  const bootstrap: Yaml = parse(text);
  bootstrap.admin.address.socket_address.port_value = 0;
  const listener = bootstrap.static_resources.listeners[0];
  listener.address.socket_address = { address: "127.0.0.1", port_value: 0 };
  const hcm = listener.filter_chains[0].filters[0].typed_config;
  for (const host of hcm.route_config.virtual_hosts) {
    for (const route of host.routes) {
      const extensions = route.typed_per_filter_config?.["envoy.filters.http.ext_authz"]?.check_settings;
      if (extensions?.context_extensions !== undefined)
        extensions.context_extensions.capability_id = options.capability;
    }
  }
  if (options.routeWithoutCapability === true) {
    const routes = hcm.route_config.virtual_hosts[0].routes;
    routes.unshift({
      match: { prefix: "/no-capability" },
      route: { cluster: "local_app", timeout: "15s" },
      typed_per_filter_config: {
        "envoy.filters.http.ext_authz": {
          "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute",
          check_settings: {},
        },
      },
    });
  }
  const extAuthz = hcm.http_filters.find((f: Yaml) => f.name === "envoy.filters.http.ext_authz").typed_config;
  if (options.timeout !== undefined) extAuthz.grpc_service.timeout = options.timeout;
  if (options.withRequestBody === true) {
    // The block deploy/envoy/envoy.yaml ships commented out, as written there.
    const block = /# with_request_body:\n((?:\s*#\s+\w+: .*\n)+)/.exec(text);
    if (block?.[1] === undefined)
      throw new Error("deploy/envoy/envoy.yaml no longer ships a with_request_body block");
    extAuthz.with_request_body = parse(block[1].replace(/^\s*#\s*/gm, ""));
  }
  if (options.accessLogPath !== undefined) {
    hcm.access_log = [
      {
        name: "envoy.access_loggers.file",
        typed_config: {
          "@type": "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog",
          path: options.accessLogPath,
          log_format: { json_format: ACCESS_LOG_FORMAT },
        },
      },
    ];
  }
  const cluster = (name: string): Yaml =>
    bootstrap.static_resources.clusters.find((c: Yaml) => c.name === name).load_assignment.endpoints[0]
      .lb_endpoints[0].endpoint.address.socket_address;
  cluster("authority_sidecar").port_value = options.sidecarPort;
  cluster("local_app").port_value = options.appPort;
  return stringify(bootstrap);
}

export interface EnvoyHandle {
  /** http://127.0.0.1:<listener port> */
  readonly url: string;
  readonly port: number;
  readonly adminUrl: string;
  /** Envoy's own pid (benches read its CPU time and RSS from /proc). */
  readonly pid: Promise<number>;
  /** The access log's JSON lines (when rendered with accessLogPath). */
  accessLog(): Promise<Array<Record<string, unknown>>>;
  output(): string;
  stop(): Promise<void>;
}

export async function startEnvoy(
  render: (accessLogPath: string) => Promise<string>,
  startTimeoutMs = 30_000,
): Promise<EnvoyHandle> {
  const dir: TempDir = await makeTempDir("envoy-");
  const configPath = join(dir.path, "envoy.yaml");
  const accessLogPath = join(dir.path, "access.log");
  const addressPath = join(dir.path, "admin-address");
  await writeFile(configPath, await render(accessLogPath));
  const peer: PeerProcess = startPeerProcess({
    command: projectTool("envoy"),
    args: [
      "-c",
      configPath,
      "--admin-address-path",
      addressPath,
      "--disable-hot-restart",
      "--concurrency",
      "1",
      "--log-level",
      "warn",
      // Flushes the access log at once, so a test can read what Envoy wrote.
      "--file-flush-interval-msec",
      "50",
    ],
  });
  const stop = async (): Promise<void> => {
    await peer.stop(5000);
    await dir.cleanup();
  };
  try {
    const deadline = Date.now() + startTimeoutMs;
    let admin = "";
    let port = 0;
    for (;;) {
      if (!peer.running) throw new Error(`envoy exited: ${peer.output()}`);
      if (Date.now() > deadline) throw new Error(`envoy did not start: ${peer.output()}`);
      admin = await readFile(addressPath, "utf8").then(
        (a) => a.trim(),
        () => "",
      );
      if (admin !== "") {
        const listeners = await fetch(`http://${admin}/listeners?format=json`).then(
          (r) => (r.ok ? (r.json() as Promise<Yaml>) : undefined),
          () => undefined,
        );
        const bound = listeners?.listener_statuses?.[0]?.local_address?.socket_address?.port_value;
        const ready = await fetch(`http://${admin}/ready`).then(
          (r) => r.ok,
          () => false,
        );
        if (typeof bound === "number" && bound > 0 && ready) {
          port = bound;
          break;
        }
      }
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    return {
      url: `http://127.0.0.1:${port}`,
      port,
      adminUrl: `http://${admin}`,
      pid: peer.pid,
      async accessLog() {
        const text = await readFile(accessLogPath, "utf8").catch(() => "");
        return text
          .split("\n")
          .filter((line) => line.trim() !== "")
          .map((line) => JSON.parse(line) as Record<string, unknown>);
      },
      output: () => peer.output(),
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}
