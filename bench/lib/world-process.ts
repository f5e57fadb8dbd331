/**
 * A bench's servers in a fresh process of their own, one per round: each round starts from a
 * new heap and new caches, and the process's CPU is the servers' alone (the load generator and
 * the bench's coordination run elsewhere). `exportName` of `moduleUrl` builds the world and
 * returns its `info` (cloneable: URLs, tokens) and the operations the bench may ask of it;
 * `cpuUs` (the process's and its event loop's CPU) and `close` are always there.
 *
 *   const world = await startWorldProcess<Info>(import.meta.url, "serveInvokeWorld");
 *   const before = await world.cpuUs(); …; await world.call("engineP50", 200); await world.close();
 */
import { fork } from "node:child_process";
import { fileURLToPath } from "node:url";
import { stopChild, track } from "./processes.ts";

export interface ServedWorld<T> {
  readonly info: T;
  readonly operations?: Readonly<Record<string, (argument: unknown) => unknown>>;
  close(): Promise<void>;
}

export interface CpuUs {
  readonly process: number;
  readonly loop: number;
}

export interface WorldProcess<T> {
  readonly info: T;
  cpuUs(): Promise<CpuUs>;
  call<R>(operation: string, argument?: unknown): Promise<R>;
  close(): Promise<void>;
}

type Reply = { ok: true; result: unknown } | { ok: false; error: string };
type Request = { readonly operation: string; readonly argument?: unknown };

const ROLE = "bench-world-process";

export async function startWorldProcess<T>(
  moduleUrl: string,
  exportName: string,
  /** Handed to the export (cloneable). */
  argument?: unknown,
): Promise<WorldProcess<T>> {
  const child = track(
    fork(fileURLToPath(import.meta.url), [], {
      env: {
        ...process.env,
        BENCH_WORLD_ROLE: ROLE,
        BENCH_WORLD_MODULE: moduleUrl,
        BENCH_WORLD_EXPORT: exportName,
      },
      stdio: ["ignore", "inherit", "inherit", "ipc"],
    }),
  );
  let queue: Promise<unknown> = Promise.resolve();
  const ask = <R>(request: Request): Promise<R> => {
    const next = queue.then(
      () =>
        new Promise<R>((resolve, reject) => {
          const onExit = (code: number | null) => reject(new Error(`world process exited with ${code}`));
          child.once("exit", onExit);
          child.once("message", (reply: Reply) => {
            child.off("exit", onExit);
            if (reply.ok) resolve(reply.result as R);
            else reject(new Error(reply.error));
          });
          child.send(request);
        }),
    );
    queue = next.catch(() => undefined);
    return next;
  };
  try {
    const info = await ask<T>({ operation: "start", argument });
    return {
      info,
      cpuUs: () => ask<CpuUs>({ operation: "cpuUs" }),
      call: (operation, argument) => ask({ operation, argument }),
      async close() {
        await ask({ operation: "close" }).catch(() => undefined);
        if (child.connected) child.disconnect();
        await stopChild(child);
      },
    };
  } catch (error) {
    await stopChild(child);
    throw error;
  }
}

if (process.env.BENCH_WORLD_ROLE === ROLE && process.send !== undefined) {
  const send = process.send.bind(process);
  let world: ServedWorld<unknown> | undefined;
  const handle = async ({ operation, argument }: Request): Promise<unknown> => {
    if (operation === "start") {
      const module = (await import(process.env.BENCH_WORLD_MODULE ?? "")) as Record<string, unknown>;
      const serve = module[process.env.BENCH_WORLD_EXPORT ?? ""];
      if (typeof serve !== "function") throw new Error(`no world export ${process.env.BENCH_WORLD_EXPORT}`);
      world = (await serve(argument)) as ServedWorld<unknown>;
      return world.info;
    }
    if (world === undefined) throw new Error("the world is not started");
    if (operation === "cpuUs") {
      const all = process.cpuUsage();
      const loop = process.threadCpuUsage();
      return { process: all.user + all.system, loop: loop.user + loop.system } satisfies CpuUs;
    }
    if (operation === "close") return world.close();
    const run = world.operations?.[operation];
    if (run === undefined) throw new Error(`no world operation ${operation}`);
    return run(argument);
  };
  process.on("message", (request: Request) => {
    handle(request).then(
      (result) => send({ ok: true, result: result ?? null } satisfies Reply),
      (error: unknown) => send({ ok: false, error: String(error) } satisfies Reply),
    );
  });
  process.on("disconnect", () => process.exit(0));
}
