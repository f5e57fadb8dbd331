/**
 * Ships decision records to the operator's log pipeline (docs/observability.md,
 * "Decision-log export"): batched, from a bounded buffer, at least once.
 *
 * - `offer(record)` never waits and never fails the decision: a deny is always taken, an
 *   allow with probability `allowSampleRate`; configured fields are masked before the record
 *   is kept. Over `maxBuffered` the record is dropped and counted.
 * - A batch (at most `batchSize`) leaves when the buffer holds a full one, or `intervalMs`
 *   after the first record waiting. A record leaves the buffer only when the endpoint
 *   answered 2xx; a network error, timeout, 408, 429 or 5xx keeps the batch at the head of
 *   the buffer and retries it after an exponential backoff (counted as retried). An endpoint
 *   that refuses a batch for good (another 4xx) would refuse it forever: it is dropped,
 *   counted, and the rest goes on.
 * - The buffer is in memory: a record delivered whose reply was lost is sent again (at least
 *   once, so receivers keep the record `id` to drop duplicates); what is buffered when the
 *   process ends without `close()` is lost, as the metrics of the last scrape show.
 */

import { positiveIntegerOption } from "../../core/positive-integer.ts";
import { type ExportedRecord, otlpLogsRequest } from "./otlp-logs.ts";

export type DecisionExportFormat = "otlp" | "json";

/** fetch's shape: the egress gate's (EgressPolicy.fetch) in every process. */
export type ExportFetch = (url: string, init: RequestInit) => Promise<Response>;

export interface DecisionExporterOptions {
  /** The OTLP/HTTP logs endpoint (`…/v1/logs`) or the plain HTTP endpoint. */
  readonly url: string;
  /** `otlp`: OTLP/HTTP JSON logs; `json`: a JSON array of the records. */
  readonly format: DecisionExportFormat;
  /** `service.name` of the OTLP resource. */
  readonly serviceName: string;
  readonly fetch: ExportFetch;
  readonly maxBuffered: number;
  readonly batchSize: number;
  readonly intervalMs: number;
  /** Top-level record fields replaced by `MASK` before the record is kept. */
  readonly maskFields: readonly string[];
  /** Fraction (0–1) of allows exported; denies always are. */
  readonly allowSampleRate: number;
  /** First retry delay, doubled up to maxDelayMs. */
  readonly retry: { readonly initialDelayMs: number; readonly maxDelayMs: number };
  /** Deadline of one request. */
  readonly requestTimeoutMs: number;
  /** [0, 1); the sampling draw. */
  readonly random: () => number;
  /** Told how many records had each outcome (for metrics). */
  readonly count: (outcome: ExportOutcome, records: number) => void;
  /** Told about failed sends (status, or the error); never given record contents. */
  readonly onSendError: (info: { readonly status?: number; readonly error?: unknown }) => void;
}

export type ExportOutcome = "sent" | "retried" | "dropped" | "sampled_out";

export interface DecisionExporterStats {
  /** Records the endpoint accepted. */
  readonly sent: number;
  /** Records sent again after a failed attempt (one count per record and attempt). */
  readonly retried: number;
  /** Records dropped: buffer full, refused for good by the endpoint, or left at close. */
  readonly dropped: number;
  /** Allows not exported by sampling. */
  readonly sampled_out: number;
  readonly buffered: number;
}

export interface DecisionExporter {
  offer(record: ExportedRecord): void;
  stats(): DecisionExporterStats;
  /** Resolves true once the buffer is empty, false if `timeoutMs` passes first. */
  flush(timeoutMs: number): Promise<boolean>;
  /** Sends what it can within `timeoutMs`; what is left is counted as dropped. */
  close(timeoutMs: number): Promise<{ readonly flushed: boolean }>;
}

export const MASK = "****";

/** Statuses after which the same batch may succeed. */
const RETRYABLE = (status: number) => status === 408 || status === 429 || status >= 500;

function checkOptions(options: DecisionExporterOptions): void {
  const positive = (name: string, value: number) => positiveIntegerOption(value, undefined, name);
  positive("maxBuffered", options.maxBuffered);
  positive("batchSize", options.batchSize);
  positive("intervalMs", options.intervalMs);
  positive("requestTimeoutMs", options.requestTimeoutMs);
  positive("retry.initialDelayMs", options.retry.initialDelayMs);
  positive("retry.maxDelayMs", options.retry.maxDelayMs);
  if (!(options.allowSampleRate >= 0 && options.allowSampleRate <= 1))
    throw new TypeError("allowSampleRate must be between 0 and 1");
  new URL(options.url);
}

export function createDecisionExporter(options: DecisionExporterOptions): DecisionExporter {
  checkOptions(options);
  const masked = new Set(options.maskFields);
  const buffer: ExportedRecord[] = [];
  const totals: Record<ExportOutcome, number> = { sent: 0, retried: 0, dropped: 0, sampled_out: 0 };
  const tally = (outcome: ExportOutcome, records: number) => {
    if (records === 0) return;
    totals[outcome] += records;
    options.count(outcome, records);
  };
  let failures = 0;
  let timer: NodeJS.Timeout | undefined;
  /** Ends a retry backoff early (flush, close). */
  let wake: (() => void) | undefined;
  let sending: Promise<void> | undefined;
  let closed = false;
  const waiters = new Set<() => void>();

  const mask = (record: ExportedRecord): ExportedRecord => {
    if (masked.size === 0) return record;
    const out: Record<string, unknown> = { ...record };
    for (const field of masked) if (Object.hasOwn(out, field) && out[field] !== null) out[field] = MASK;
    return out;
  };

  const body = (batch: readonly ExportedRecord[]): string =>
    JSON.stringify(options.format === "otlp" ? otlpLogsRequest(options.serviceName, batch) : batch);

  /** One attempt at the head batch: true when it left the buffer (sent or refused for good). */
  const attempt = async (): Promise<boolean> => {
    const batch = buffer.slice(0, options.batchSize);
    let status: number | undefined;
    try {
      const response = await options.fetch(options.url, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: body(batch),
        signal: AbortSignal.timeout(options.requestTimeoutMs),
      });
      await response.arrayBuffer().catch(() => undefined);
      status = response.status;
    } catch (error) {
      options.onSendError({ error });
      return false;
    }
    if (status >= 200 && status < 300) tally("sent", batch.length);
    else if (RETRYABLE(status)) {
      options.onSendError({ status });
      return false;
    } else {
      options.onSendError({ status });
      tally("dropped", batch.length);
    }
    buffer.splice(0, batch.length);
    return true;
  };

  const settleWaiters = () => {
    if (buffer.length > 0) return;
    for (const resolve of waiters) resolve();
    waiters.clear();
  };

  const run = async (): Promise<void> => {
    while (buffer.length > 0) {
      if (await attempt()) {
        failures = 0;
        settleWaiters();
        // A partial batch waits for more unless closing or flushing.
        if (buffer.length < options.batchSize && waiters.size === 0 && !closed) break;
        continue;
      }
      failures++;
      tally("retried", Math.min(buffer.length, options.batchSize));
      if (closed && waiters.size === 0) return;
      const delay = Math.min(
        options.retry.maxDelayMs,
        options.retry.initialDelayMs * 2 ** Math.min(failures - 1, 20),
      );
      await new Promise<void>((resolve) => {
        const backoff = setTimeout(() => wake?.(), delay);
        backoff.unref();
        wake = () => {
          clearTimeout(backoff);
          wake = undefined;
          resolve();
        };
      });
    }
    settleWaiters();
  };

  const kick = (now: boolean) => {
    if (sending !== undefined) return;
    if (!now) {
      if (timer === undefined && buffer.length > 0) {
        timer = setTimeout(() => {
          timer = undefined;
          kick(true);
        }, options.intervalMs);
        timer.unref();
      }
      return;
    }
    if (timer !== undefined) clearTimeout(timer);
    timer = undefined;
    sending = run().finally(() => {
      sending = undefined;
      if (buffer.length > 0 && !closed) kick(buffer.length >= options.batchSize);
    });
  };

  const flush = (timeoutMs: number): Promise<boolean> => {
    if (buffer.length === 0) return Promise.resolve(true);
    return new Promise<boolean>((resolve) => {
      const done = () => {
        clearTimeout(deadline);
        resolve(true);
      };
      const deadline = setTimeout(() => {
        waiters.delete(done);
        resolve(buffer.length === 0);
      }, timeoutMs);
      deadline.unref();
      waiters.add(done);
      if (sending === undefined) kick(true);
      else wake?.();
    });
  };

  return {
    offer(record) {
      if (closed) return;
      if (
        record.decision !== "denied" &&
        options.allowSampleRate < 1 &&
        options.random() >= options.allowSampleRate
      ) {
        tally("sampled_out", 1);
        return;
      }
      if (buffer.length >= options.maxBuffered) {
        tally("dropped", 1);
        return;
      }
      buffer.push(mask(record));
      kick(buffer.length >= options.batchSize);
    },
    stats: () => ({ ...totals, buffered: buffer.length }),
    flush,
    async close(timeoutMs) {
      const flushed = await flush(timeoutMs);
      closed = true;
      if (timer !== undefined) clearTimeout(timer);
      timer = undefined;
      wake?.();
      tally("dropped", buffer.length);
      buffer.length = 0;
      return { flushed };
    },
  };
}
