/**
 * The shared backend for several replicas. Layout (prefix default `authority:`):
 *   <p>doc:<collection>:<id>   string, the JSON document, PX TTL when it has one
 *   <p>idx:<collection>        sorted set of ids, score 0, listed with ZRANGEBYLEX
 *   <p>exp:<collection>        sorted set of ids with a TTL, score = expiry (server ms)
 *   <p>log:<log> / <p>logseq:<log>   list of "<seq> <json>" entries / INCR'd seq
 *   <p>logtrim:<log>           how many of the oldest entries retention removed
 *   <p>lt:<log>                sorted set (score 0) of `<time ms, 15 digits>:<seq, 16 digits>`
 *   <p>lx:<log>:<field>:<value>   the same members, for the entries with that indexed value
 *   <p>ctr:<counters>          hash of counter key → integer (HINCRBY)
 *   <p>ctrk:<counters>         sorted set (score 0) of the hash's keys, read by prefix with ZRANGEBYLEX
 * Collection and log names cannot contain ':', so keys never collide.
 */

import type { Redis } from "ioredis";
import { positiveIntegerOption } from "../../core/positive-integer.ts";
import {
  checkAfterSeq,
  checkId,
  checkIncrement,
  checkLimit,
  checkListOptions,
  checkMatch,
  checkName,
  checkTtl,
  decodeValue,
  encodeValue,
  invalidArgument,
  prefixUpperBound,
  returnedInteger,
  StoreError,
  StoreInvalidArgumentError,
} from "../errors.ts";
import {
  checkCounterRange,
  checkIdLookup,
  checkLogQuery,
  checkLogTrim,
  LOG_INDEX_FIELDS,
  LOG_QUERY_BUDGET,
  type LogIndexField,
  type LogIndexValues,
  logIndexValues,
  trimCount,
} from "../log-query.ts";
import type {
  FieldMatch,
  ListOptions,
  LogEntry,
  LogQuery,
  LogQueryPage,
  LogTrim,
  Page,
  ReadLogOptions,
  Store,
  StoredItem,
  StoreHealth,
  StoreWrite,
  TimedLogEntry,
  WriteOptions,
} from "../store.ts";
import { type CheckedWrite, checkWrites } from "../write-batch.ts";
import { type LuaScript, RedisConnection, type RedisConnectionOptions } from "./connection.ts";
import {
  APPEND_MANY,
  COUNT,
  COUNTER_INCREMENT,
  DELETE,
  DELETE_COUNTERS,
  INDEX_KEYS_PER_ENTRY,
  PRUNE,
  QUERY_LOG,
  READ_LOG,
  TRIM_LOG,
  WRITE,
} from "./scripts.ts";

export interface RedisStoreOptions extends RedisConnectionOptions {
  /** `redis://[user:password@]host:port/db` or `rediss://…`. */
  readonly url: string;
  /** Prefix of every key this store touches. Default `authority:`. */
  readonly keyPrefix?: string;
  /** How long health() waits for PING, ms. Default 1000. */
  readonly healthTimeoutMs?: number;
}

const KEY_PREFIX_PATTERN = /^[A-Za-z0-9_.:{}-]{0,128}$/;

interface LogKeys {
  readonly seq: string;
  readonly list: string;
  readonly trimmed: string;
  readonly time: string;
  /** id → seq of the entries with an id (decision 2751). */
  readonly ids: string;
  field(field: LogIndexField, value: string): string;
}

const toInteger = (value: unknown, what: string): number => returnedInteger(value, "Redis", what);

/** Fields or members HSCAN / ZSCAN return per step, and keys per HMGET. */
const SCAN_COUNT = 1000;

const timeDigits = (time: number): string => String(time).padStart(15, "0");
/** The index member of an entry: ordered by (time, seq) as text. */
const indexMember = (time: number, seq: number): string =>
  `${timeDigits(time)}:${String(seq).padStart(16, "0")}`;

function parseMember(member: unknown): { time: number; seq: number } {
  if (typeof member !== "string" || !/^[0-9]{15}:[0-9]{16}$/.test(member)) {
    throw new StoreError("Redis log index member is malformed.");
  }
  return { time: Number(member.slice(0, 15)), seq: Number(member.slice(16)) };
}

function splitEntry(line: string): { seq: number; json: string } {
  const space = line.indexOf(" ");
  if (space < 1) throw new StoreError("Redis log entry is malformed.");
  return { seq: toInteger(line.slice(0, space), "seq"), json: line.slice(space + 1) };
}

/** The WRITE script's modes (scripts.ts). */
const WRITE_MODES = { put: "0", create: "1", match: "2" } as const;

export class RedisStore implements Store {
  readonly backend = "redis" as const;
  readonly keyPrefix: string;
  readonly #connection: RedisConnection;
  readonly #healthTimeoutMs: number;

  constructor(options: RedisStoreOptions) {
    if (typeof options?.url !== "string") throw new StoreInvalidArgumentError("Redis store needs a URL.");
    const keyPrefix = options.keyPrefix ?? "authority:";
    if (typeof keyPrefix !== "string" || !KEY_PREFIX_PATTERN.test(keyPrefix)) {
      throw new StoreInvalidArgumentError(`keyPrefix must match ${KEY_PREFIX_PATTERN.source}.`);
    }
    const healthTimeoutMs = positiveIntegerOption(
      options.healthTimeoutMs,
      1000,
      "healthTimeoutMs",
      invalidArgument,
    );
    this.keyPrefix = keyPrefix;
    this.#healthTimeoutMs = healthTimeoutMs;
    this.#connection = new RedisConnection(options.url, options);
  }

  /** host:port of the server (never credentials). */
  get endpoint(): string {
    return this.#connection.endpoint;
  }

  #docPrefix(collection: string): string {
    return `${this.keyPrefix}doc:${collection}:`;
  }

  #collectionKeys(collection: string, id: string): [string, string, string] {
    return [
      `${this.#docPrefix(collection)}${id}`,
      `${this.keyPrefix}idx:${collection}`,
      `${this.keyPrefix}exp:${collection}`,
    ];
  }

  async get<T>(collection: string, id: string): Promise<T | undefined> {
    const name = checkName("collection", collection);
    const docId = checkId("id", id);
    return this.#connection.run("get", async (client) => {
      const keys = this.#collectionKeys(name, docId);
      const text = await client.get(keys[0]);
      if (text !== null) return decodeValue<T>(text);
      await this.#connection.script(client, PRUNE, [...keys, docId]);
      return undefined;
    });
  }

  async put<T>(collection: string, id: string, value: T, options?: WriteOptions): Promise<void> {
    const args = this.#writeArgs(collection, id, value, options, "put");
    return this.#connection.run("put", async (client) => {
      await this.#connection.script(client, WRITE, args);
    });
  }

  async create<T>(collection: string, id: string, value: T, options?: WriteOptions): Promise<boolean> {
    const args = this.#writeArgs(collection, id, value, options, "create");
    return this.#connection.run("create", async (client) => {
      return toInteger(await this.#connection.script(client, WRITE, args), "create result") === 1;
    });
  }

  async putIfMatch<T>(
    collection: string,
    id: string,
    value: T,
    match: FieldMatch,
    options?: WriteOptions,
  ): Promise<boolean> {
    const { field, equals } = checkMatch(match);
    const args = [...this.#writeArgs(collection, id, value, options, "match"), field, equals];
    return this.#connection.run("putIfMatch", async (client) => {
      return toInteger(await this.#connection.script(client, WRITE, args), "putIfMatch result") === 1;
    });
  }

  #writeArgs(
    collection: string,
    id: string,
    value: unknown,
    options: WriteOptions | undefined,
    mode: "put" | "create" | "match",
  ): string[] {
    const name = checkName("collection", collection);
    const docId = checkId("id", id);
    const ttl = checkTtl(options);
    return [
      ...this.#collectionKeys(name, docId),
      docId,
      encodeValue(value),
      ttl === undefined ? "" : String(ttl),
      WRITE_MODES[mode],
      this.#docPrefix(name),
    ];
  }

  delete(collection: string, id: string): Promise<boolean> {
    return this.#delete("delete", collection, id, []);
  }

  async deleteIfMatch(collection: string, id: string, match: FieldMatch): Promise<boolean> {
    const { field, equals } = checkMatch(match);
    return this.#delete("deleteIfMatch", collection, id, [field, equals]);
  }

  async #delete(what: string, collection: string, id: string, match: string[]): Promise<boolean> {
    const name = checkName("collection", collection);
    const docId = checkId("id", id);
    return this.#connection.run(what, async (client) => {
      const removed = await this.#connection.script(client, DELETE, [
        ...this.#collectionKeys(name, docId),
        docId,
        ...match,
      ]);
      return toInteger(removed, `${what} result`) === 1;
    });
  }

  async list<T>(collection: string, options?: ListOptions): Promise<Page<T>> {
    const name = checkName("collection", collection);
    const range = checkListOptions(options);
    return this.#connection.run("list", async (client) => {
      const index = `${this.keyPrefix}idx:${name}`;
      const max = range.upper === undefined ? "+" : `(${range.upper}`;
      let min = range.lower === undefined ? "-" : `${range.lowerExclusive ? "(" : "["}${range.lower}`;
      const items: StoredItem<T>[] = [];
      // One more than the page so we know whether a next page exists. Ids whose document
      // expired are pruned and skipped, so a batch may need to be topped up.
      while (items.length <= range.limit) {
        const want = range.limit + 1 - items.length;
        const ids = await client.zrangebylex(index, min, max, "LIMIT", 0, want);
        const last = ids.at(-1);
        if (last === undefined) break;
        const values = await client.mget(ids.map((id) => `${this.#docPrefix(name)}${id}`));
        for (const [i, id] of ids.entries()) {
          const text = values[i];
          if (typeof text === "string") {
            items.push({ id, value: decodeValue<T>(text) });
          } else {
            await this.#connection.script(client, PRUNE, [...this.#collectionKeys(name, id), id]);
          }
        }
        if (ids.length < want) break;
        min = `(${last}`;
      }
      const page = items.slice(0, range.limit);
      const lastOnPage = page.at(-1);
      return items.length > range.limit && lastOnPage !== undefined
        ? { items: page, next: lastOnPage.id }
        : { items: page };
    });
  }

  async count(collection: string): Promise<number> {
    const name = checkName("collection", collection);
    return this.#connection.run("count", async (client) => {
      const result = await this.#connection.script(client, COUNT, [
        `${this.keyPrefix}idx:${name}`,
        `${this.keyPrefix}exp:${name}`,
        this.#docPrefix(name),
      ]);
      return toInteger(result, "count");
    });
  }

  #logKeys(log: string): LogKeys {
    const name = checkName("log", log);
    const p = this.keyPrefix;
    return {
      seq: `${p}logseq:${name}`,
      list: `${p}log:${name}`,
      trimmed: `${p}logtrim:${name}`,
      time: `${p}lt:${name}`,
      ids: `${p}lid:${name}`,
      field: (field: LogIndexField, value: string) => `${p}lx:${name}:${field}:${value}`,
    };
  }

  /** The index keys of one entry, '' for a field it has no indexed value for. */
  #indexKeys(keys: LogKeys, index: LogIndexValues): string[] {
    const out = LOG_INDEX_FIELDS.map((field) => {
      const value = index.fields[field];
      return value === null ? "" : keys.field(field, value);
    });
    if (out.length !== INDEX_KEYS_PER_ENTRY) throw new StoreError("Redis log index layout mismatch.");
    return out;
  }

  async append<T>(log: string, value: T): Promise<number> {
    const [seq] = await this.appendMany(log, [value]);
    return seq ?? 0;
  }

  async appendMany<T>(log: string, values: readonly T[]): Promise<number[]> {
    const keys = this.#logKeys(log);
    const texts = values.map((value) => encodeValue(value));
    if (texts.length === 0) return [];
    const args: string[] = [String(texts.length)];
    texts.forEach((text, i) => {
      const index = logIndexValues(values[i]);
      args.push(text, timeDigits(index.time), index.id ?? "", ...this.#indexKeys(keys, index));
    });
    return this.#connection.run("append", async (client) => {
      const seqs = await this.#connection.script(client, APPEND_MANY, [
        keys.seq,
        keys.list,
        keys.time,
        keys.ids,
        ...args,
      ]);
      if (!Array.isArray(seqs) || seqs.length !== texts.length)
        throw new StoreError("Redis appended an unexpected number of entries.");
      return seqs.map((seq) => toInteger(seq, "seq"));
    });
  }

  async logIdsHeld(log: string, ids: readonly string[]): Promise<string[]> {
    const keys = this.#logKeys(log);
    const wanted = checkIdLookup(ids);
    if (wanted.length === 0) return [];
    return this.#connection.run("logIdsHeld", async (client) => {
      const seqs = await client.hmget(keys.ids, ...wanted);
      return wanted.filter((_, i) => seqs[i] !== null);
    });
  }

  async readLog<T>(log: string, options?: ReadLogOptions): Promise<LogEntry<T>[]> {
    const keys = this.#logKeys(log);
    const after = checkAfterSeq(options);
    const limit = checkLimit(options?.limit);
    return this.#connection.run("readLog", async (client) => {
      const raw = await this.#connection.script(client, READ_LOG, [keys.list, keys.trimmed, after, limit]);
      const entries: LogEntry<T>[] = [];
      for (const line of raw as string[]) {
        const { seq, json } = splitEntry(line);
        if (seq > after) entries.push({ seq, value: decodeValue<T>(json) });
      }
      return entries;
    });
  }

  async logLength(log: string): Promise<number> {
    const keys = this.#logKeys(log);
    return this.#connection.run("logLength", async (client) =>
      toInteger((await client.get(keys.seq)) ?? 0, "seq"),
    );
  }

  async queryLog<T>(log: string, query?: LogQuery): Promise<LogQueryPage<T>> {
    const keys = this.#logKeys(log);
    const checked = checkLogQuery(query);
    const candidates =
      checked.indexed.length === 0
        ? [keys.time]
        : checked.indexed.map(([field, value]) => keys.field(field, value));
    const lowerFromSince = `[${timeDigits(checked.since)}:`;
    const cursor = checked.afterTime < 0 ? undefined : indexMember(checked.afterTime, checked.afterSeq);
    const lower = cursor !== undefined && `[${cursor}` >= lowerFromSince ? `(${cursor}` : lowerFromSince;
    const upper = `[${timeDigits(checked.until)}:9999999999999999`;
    const conditions = [...checked.indexed, ...checked.other].flat();
    return this.#connection.run("queryLog", async (client) => {
      const raw = (await this.#connection.script(client, QUERY_LOG, [
        keys.list,
        keys.trimmed,
        lower,
        upper,
        checked.limit,
        LOG_QUERY_BUDGET,
        candidates.length,
        ...candidates,
        ...conditions,
      ])) as unknown[];
      const done = raw[0] === 1;
      const entries: TimedLogEntry<T>[] = [];
      for (let i = 2; i + 1 < raw.length; i += 2) {
        const { time, seq } = parseMember(raw[i]);
        entries.push({ seq, time, value: decodeValue<T>(String(raw[i + 1])) });
      }
      if (entries.length > checked.limit) {
        const page = entries.slice(0, checked.limit);
        const last = page.at(-1) as TimedLogEntry<T>;
        return { entries: page, next: { time: last.time, seq: last.seq } };
      }
      return done || raw[1] === "" ? { entries } : { entries, next: parseMember(raw[1]) };
    });
  }

  async trimLog(log: string, rule: LogTrim): Promise<number> {
    const keys = this.#logKeys(log);
    const trim = checkLogTrim(rule);
    return this.#connection.run("trimLog", async (client) => {
      const [lines, last] = await Promise.all([
        client.lrange(keys.list, 0, trim.max - 1),
        client.get(keys.seq),
      ]);
      const oldest = lines.map((line) => {
        const { seq, json } = splitEntry(line);
        return { seq, index: logIndexValues(decodeValue<unknown>(json)) };
      });
      const first = oldest[0];
      if (first === undefined) return 0;
      const total = toInteger(last ?? 0, "seq") - first.seq + 1;
      const n = trimCount(
        oldest.map((entry) => entry.index.time),
        total,
        trim,
      );
      if (n === 0) return 0;
      const args = oldest
        .slice(0, n)
        .flatMap((entry) => [
          indexMember(entry.index.time, entry.seq),
          entry.index.id ?? "",
          ...this.#indexKeys(keys, entry.index),
        ]);
      const removed = await this.#connection.script(client, TRIM_LOG, [
        keys.list,
        keys.trimmed,
        keys.time,
        keys.ids,
        n,
        first.seq,
        ...args,
      ]);
      return toInteger(removed, "trim count");
    });
  }

  /** A counter hash and its key index (decision 2911). */
  #counterKeys(counters: string): [hash: string, index: string] {
    const name = checkName("counters", counters);
    return [`${this.keyPrefix}ctr:${name}`, `${this.keyPrefix}ctrk:${name}`];
  }

  async increment(counters: string, key: string, by?: number): Promise<number> {
    const keys = this.#counterKeys(counters);
    const field = checkId("counter key", key);
    const amount = checkIncrement(by);
    return this.#connection.run("increment", async (client) =>
      toInteger(
        await this.#connection.script(client, COUNTER_INCREMENT, [...keys, field, amount]),
        "counter",
      ),
    );
  }

  async readCounters(counters: string, prefix?: string): Promise<Record<string, number>> {
    const [hash, index] = this.#counterKeys(counters);
    const wanted = checkListOptions(prefix === undefined ? undefined : { prefix }).prefix ?? "";
    return this.#connection.run("readCounters", async (client) => {
      await this.#indexCounters(client, hash, index);
      const upper = prefixUpperBound(wanted);
      const keys = await client.zrangebylex(
        index,
        wanted === "" ? "-" : `[${wanted}`,
        upper === undefined ? "+" : `(${upper}`,
      );
      const result: Record<string, number> = {};
      for (let i = 0; i < keys.length; i += SCAN_COUNT) {
        const chunk = keys.slice(i, i + SCAN_COUNT);
        const values = await client.hmget(hash, ...chunk);
        chunk.forEach((key, j) => {
          const value = values[j];
          if (value !== null && value !== undefined) result[key] = toInteger(value, "counter");
        });
      }
      return result;
    });
  }

  /**
   * Makes the key index hold exactly the hash's keys when their counts differ: counters written
   * before the index existed (or by an older release during a rollout) are added, members whose
   * counter an older release removed are dropped. Equal counts (the normal case) cost HLEN + ZCARD.
   */
  async #indexCounters(client: Redis, hash: string, index: string): Promise<void> {
    const [[, fields], [, members]] = ((await client.multi().hlen(hash).zcard(index).exec()) ?? []) as [
      [unknown, number],
      [unknown, number],
    ];
    if (fields === members) return;
    let cursor = "0";
    do {
      const [next, flat] = await client.hscan(hash, cursor, "COUNT", SCAN_COUNT);
      const keys = flat.filter((_, i) => i % 2 === 0);
      if (keys.length > 0) await client.zadd(index, ...keys.flatMap((key) => [0, key]));
      cursor = next;
    } while (cursor !== "0");
    do {
      const [next, flat] = await client.zscan(index, cursor, "COUNT", SCAN_COUNT);
      const keys = flat.filter((_, i) => i % 2 === 0);
      const values = keys.length === 0 ? [] : await client.hmget(hash, ...keys);
      const gone = keys.filter((_, i) => values[i] === null);
      if (gone.length > 0) await client.zrem(index, ...gone);
      cursor = next;
    } while (cursor !== "0");
  }

  async deleteCounters(counters: string, prefix: string, before: string, max?: number): Promise<number> {
    const [hash, index] = this.#counterKeys(counters);
    const range = checkCounterRange(prefix, before, max);
    return this.#connection.run("deleteCounters", async (client) => {
      await this.#indexCounters(client, hash, index);
      const removed = await this.#connection.script(client, DELETE_COUNTERS, [
        hash,
        index,
        range.lower === undefined ? "-" : `[${range.lower}`,
        `(${range.upper}`,
        range.max,
      ]);
      return toInteger(removed, "removed counters");
    });
  }

  async writeAll(writes: readonly StoreWrite[]): Promise<void> {
    const checked = checkWrites(writes);
    if (checked.length === 0) return;
    const commands = checked.map((write) => this.#writeCommand(write));
    return this.#connection.run("writeAll", async (client) => {
      // MULTI/EXEC: no other client runs a command in between. EVAL (not EVALSHA) inside,
      // so a server that lost its script cache cannot fail part of the batch.
      const multi = client.multi();
      for (const [script, args] of commands) multi.eval(script.source, script.keys, ...args);
      const results = await multi.exec();
      const failed = results?.find(([error]) => error !== null);
      if (results === null || failed !== undefined) {
        throw new StoreError("Redis did not apply the whole batch.", { cause: failed?.[0] ?? undefined });
      }
    });
  }

  #writeCommand(write: CheckedWrite): [LuaScript, Array<string | number>] {
    switch (write.op) {
      case "put":
        return [
          WRITE,
          [
            ...this.#collectionKeys(write.collection, write.id),
            write.id,
            write.text,
            write.ttlMs === undefined ? "" : String(write.ttlMs),
            WRITE_MODES.put,
            this.#docPrefix(write.collection),
          ],
        ];
      case "delete":
        return [DELETE, [...this.#collectionKeys(write.collection, write.id), write.id]];
      case "append": {
        const keys = this.#logKeys(write.log);
        return [
          APPEND_MANY,
          [
            keys.seq,
            keys.list,
            keys.time,
            keys.ids,
            1,
            write.text,
            timeDigits(write.index.time),
            write.index.id ?? "",
            ...this.#indexKeys(keys, write.index),
          ],
        ];
      }
      case "increment":
        return [COUNTER_INCREMENT, [...this.#counterKeys(write.counters), write.key, write.by]];
    }
  }

  async health(): Promise<StoreHealth> {
    const where = `redis ${this.#connection.endpoint} db ${this.#connection.address.db}`;
    if (this.#connection.closed) return { backend: "redis", ok: false, detail: `${where}: store is closed` };
    try {
      await this.#connection.run(
        "health",
        async (client) => {
          let timer: NodeJS.Timeout | undefined;
          const limit = new Promise<never>((_, reject) => {
            timer = setTimeout(() => reject(new Error("PING timed out")), this.#healthTimeoutMs);
          });
          try {
            await Promise.race([client.ping(), limit]);
          } finally {
            clearTimeout(timer);
          }
        },
        this.#healthTimeoutMs,
      );
      return { backend: "redis", ok: true, detail: `${where}: ready` };
    } catch {
      return { backend: "redis", ok: false, detail: `${where}: unavailable (${this.#connection.state})` };
    }
  }

  async close(): Promise<void> {
    return this.#connection.close();
  }
}
