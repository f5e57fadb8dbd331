import type { Logger } from "../../observability/logger.ts";

/**
 * What the sidecar proves before it reports ready (docs/sidecar.md, "Readiness"): each step
 * runs at start and is retried with backoff until it succeeds once. A failing step keeps
 * `/readyz` at 503 and is logged when its cause first appears or changes — not on every retry
 * — and once more when it recovers.
 */

export interface WarmUpStep {
  /** The `/readyz` check's name. */
  readonly name: string;
  /** What the log says when the step fails (`"the JWKS could not be fetched"`). */
  readonly failure: string;
  /**
   * Steps that must have succeeded before this one starts. A step that keeps the CPU busy (a
   * compilation) runs after the network steps, whose deadlines it would otherwise eat into.
   */
  readonly after?: readonly string[];
  run(): Promise<void>;
}

export interface WarmUpOptions {
  readonly steps: readonly WarmUpStep[];
  readonly logger: Logger;
  /** First retry delay (default 500 ms), doubled up to `maxRetryMs` (default 10000 ms). */
  readonly retryMs?: number;
  readonly maxRetryMs?: number;
}

export interface WarmUp {
  start(): void;
  /** Per step: has it succeeded. */
  checks(): Record<string, boolean>;
  /** Resolves once every step succeeded, or false after `timeoutMs`. */
  whenDone(timeoutMs: number): Promise<boolean>;
  stop(): void;
}

/**
 * Resolves once `busy()` is false — checked after a turn of the event loop, then every
 * millisecond — or after `maxWaitMs` at the latest. The warm-up's CPU-bound parts wait so for
 * the requests already in flight (decision 3141): those are answered first, and requests that
 * never pause delay readiness by at most `maxWaitMs` per part, never stop it.
 */
export async function afterRequestsInFlight(busy: () => boolean, maxWaitMs: number): Promise<void> {
  await new Promise((resolve) => setImmediate(resolve));
  const until = performance.now() + maxWaitMs;
  while (busy() && performance.now() < until) {
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
}

const SAFE_TEXT = /^[\w .,:;()'/+-]{1,200}$/;

/**
 * A log-safe description of why a step failed: error names, codes and statuses along the
 * cause chain, and the messages of the errors this code base writes itself without input
 * (their classes are listed). Never a token or a secret: those never appear in these fields.
 */
export function describeFailure(error: unknown): Record<string, unknown> {
  const chain: Record<string, unknown>[] = [];
  let current: unknown = error;
  for (let depth = 0; depth < 4 && current instanceof Error; depth++) {
    const { code, status } = current as { code?: unknown; status?: unknown };
    const ownMessage =
      ["AuthorityFetchError", "TokenVerificationError", "SidecarConfigError"].includes(current.name) &&
      SAFE_TEXT.test(current.message);
    chain.push({
      name: current.name,
      ...(typeof code === "string" && SAFE_TEXT.test(code) ? { code } : {}),
      ...(typeof status === "number" ? { status } : {}),
      ...(ownMessage ? { message: current.message } : {}),
    });
    current = current.cause;
  }
  return chain.length === 0 ? { type: typeof error } : { errors: chain };
}

export function createWarmUp(options: WarmUpOptions): WarmUp {
  const retryMs = options.retryMs ?? 500;
  const maxRetryMs = options.maxRetryMs ?? 10_000;
  const done = new Set<string>();
  const waiters = new Set<() => void>();
  const timers = new Set<NodeJS.Timeout>();
  let stopped = false;
  let started = false;

  const launched = new Set<string>();
  const settleWaiters = () => {
    if (done.size < options.steps.length) return;
    for (const wake of waiters) wake();
    waiters.clear();
  };
  // Starts every step not yet started whose prerequisites have all succeeded.
  const launchReady = (): void => {
    if (stopped) return;
    for (const step of options.steps) {
      if (launched.has(step.name)) continue;
      if (!(step.after ?? []).every((name) => done.has(name))) continue;
      launched.add(step.name);
      runStep(step, retryMs, undefined);
    }
  };

  const runStep = (step: WarmUpStep, delayMs: number, lastCause: string | undefined): void => {
    step.run().then(
      () => {
        if (stopped) return;
        done.add(step.name);
        if (lastCause !== undefined)
          options.logger.info({ check: step.name }, `${step.name} check passes again`);
        settleWaiters();
        launchReady();
      },
      (error: unknown) => {
        if (stopped) return;
        const cause = describeFailure(error);
        const key = JSON.stringify(cause);
        // Once per cause: a sidecar with a wrong secret retries forever, its log says it once.
        if (key !== lastCause) {
          options.logger.error(
            { check: step.name, cause },
            `not ready: ${step.failure}; retrying until it succeeds`,
          );
        }
        const timer = setTimeout(() => {
          timers.delete(timer);
          runStep(step, Math.min(delayMs * 2, maxRetryMs), key);
        }, delayMs);
        timer.unref();
        timers.add(timer);
      },
    );
  };

  return {
    start() {
      if (started) return;
      started = true;
      const names = new Set(options.steps.map((step) => step.name));
      for (const step of options.steps) {
        for (const name of step.after ?? []) {
          if (!names.has(name))
            throw new Error(`warm-up step ${step.name} waits for an unknown step ${name}`);
        }
      }
      launchReady();
    },
    checks() {
      return Object.fromEntries(options.steps.map((step) => [step.name, done.has(step.name)]));
    },
    whenDone(timeoutMs) {
      if (done.size >= options.steps.length) return Promise.resolve(true);
      return new Promise((resolve) => {
        const wake = () => {
          clearTimeout(timer);
          resolve(true);
        };
        const timer = setTimeout(() => {
          waiters.delete(wake);
          resolve(false);
        }, timeoutMs);
        waiters.add(wake);
      });
    },
    stop() {
      stopped = true;
      for (const timer of timers) clearTimeout(timer);
      timers.clear();
    },
  };
}
