/**
 * The open-loop HTTP generator (open-loop-http.ts) in a process of its own, so the load it
 * makes and the servers it measures never share an event loop with the bench's own servers
 * (authority, IdP). Runs are queued: one at a time.
 *
 *   const loader = startHttpLoader();
 *   const result = await loader.run({ url, method: "GET", rate: 1000, durationMs: 5000 });
 */
import { fork } from "node:child_process";
import { fileURLToPath } from "node:url";
import { type OpenLoopOptions, type OpenLoopResult, openLoopHttp } from "./open-loop-http.ts";
import { stopChild, track } from "./processes.ts";

const ROLE = "bench-http-load-generator";

export interface HttpLoader {
  readonly pid: number | undefined;
  run(options: OpenLoopOptions): Promise<OpenLoopResult>;
  close(): Promise<void>;
}

type Reply = { ok: true; result: OpenLoopResult } | { ok: false; error: string };

export function startHttpLoader(): HttpLoader {
  const child = track(
    fork(fileURLToPath(import.meta.url), [], {
      env: { ...process.env, BENCH_LOAD_ROLE: ROLE },
      // Small semi-spaces: the generator's own scavenges stay well under a millisecond.
      execArgv: ["--max-semi-space-size=1"],
      stdio: ["ignore", "inherit", "inherit", "ipc"],
    }),
  );
  let queue: Promise<unknown> = Promise.resolve();
  return {
    pid: child.pid,
    run(options) {
      const next = queue.then(
        () =>
          new Promise<OpenLoopResult>((resolve, reject) => {
            const onExit = (code: number | null) => reject(new Error(`load generator exited with ${code}`));
            child.once("exit", onExit);
            child.once("message", (reply: Reply) => {
              child.off("exit", onExit);
              if (reply.ok) resolve(reply.result);
              else reject(new Error(reply.error));
            });
            child.send(options);
          }),
      );
      queue = next.catch(() => undefined);
      return next;
    },
    async close() {
      if (child.connected) child.disconnect();
      await stopChild(child);
    },
  };
}

if (process.env.BENCH_LOAD_ROLE === ROLE && process.send !== undefined) {
  const send = process.send.bind(process);
  process.on("message", (options: OpenLoopOptions) => {
    openLoopHttp(options).then(
      (result) => send({ ok: true, result } satisfies Reply),
      (error: unknown) => send({ ok: false, error: String(error) } satisfies Reply),
    );
  });
  process.on("disconnect", () => process.exit(0));
}
