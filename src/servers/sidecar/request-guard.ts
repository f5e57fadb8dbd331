import { AsyncLocalStorage } from "node:async_hooks";
import { errorSummary } from "./errors.ts";

/**
 * The last line of defence of the sidecar process: an exception nobody caught, thrown while a
 * request was being handled (in its handler or anything it started: timers, promises, stream
 * events), fails that request closed — a deny, or a cut connection when its answer had begun —
 * instead of the process and every request in it. Each transport runs its handler inside
 * `guardRequest` with what failing closed means for it; the request's async context carries
 * it to the process's `uncaughtException` / `unhandledRejection` handler. An exception outside
 * any request still ends the process (`onFatal`): its state is unknown, and the decision
 * journal keeps every record for the next start.
 *
 * This is not how failures are meant to be handled: every step catches what it can throw and
 * answers from the error table. The guard only keeps one missed case from taking every other
 * request (and the queued records of a process without a journal) with it.
 */

const current = new AsyncLocalStorage<() => void>();

/** Where a failure the guard caught is logged (installProcessGuard sets it). */
let report: (error: unknown) => void = () => undefined;

/**
 * Runs `handler` with `failClosed` as what an exception it does not catch does: thrown at once
 * (caught here) or later in anything it started (caught by the process guard).
 */
export function guardRequest(failClosed: () => void, handler: () => void): void {
  current.run(failClosed, () => {
    try {
      handler();
    } catch (error) {
      failRequest(error, failClosed);
    }
  });
}

function failRequest(error: unknown, failClosed: () => void): void {
  report(error);
  try {
    failClosed();
  } catch {
    // Failing closed must not throw again.
  }
}

export interface ProcessGuardOptions {
  readonly logger: {
    error(obj: Record<string, unknown>, msg: string): void;
    fatal(obj: Record<string, unknown>, msg: string): void;
  };
  /** An exception outside any request: the process's state is unknown. */
  readonly onFatal: (error: unknown) => void;
}

/** Installs the handlers; returns what removes them. */
export function installProcessGuard(options: ProcessGuardOptions): () => void {
  report = (error) =>
    options.logger.error(
      { err: errorSummary(error) },
      "unexpected exception in a request; the request failed closed",
    );
  const onError = (error: unknown): void => {
    const failClosed = current.getStore();
    if (failClosed !== undefined) {
      failRequest(error, failClosed);
      return;
    }
    options.logger.fatal({ err: errorSummary(error) }, "unexpected exception outside a request; exiting");
    options.onFatal(error);
  };
  const onRejection = (reason: unknown): void => onError(reason);
  process.on("uncaughtException", onError);
  process.on("unhandledRejection", onRejection);
  return () => {
    report = () => undefined;
    process.off("uncaughtException", onError);
    process.off("unhandledRejection", onRejection);
  };
}
