/**
 * The shared backend for several replicas. Layout (prefix default `authority:`):
 *   <p>doc:<collection>:<id>   string, the JSON document, PX TTL when it has one
 *   <p>idx:<collection>        sorted set of ids, score 0, listed with ZRANGEBYLEX
 *   <p>exp:<collection>        sorted set of ids with a TTL, score = expiry (server ms)
 *   <p>log:<log> / <p>logseq:<log>   list of "<seq> <json>" entries / INCR'd seq
 *   <p>ctr:<counters>          hash of counter key → integer (HINCRBY)
 * Collection and log names cannot contain ':', so keys never collide.
 */
import {
  checkAfterSeq,
  checkId,
  checkIncrement,
  checkLimit,
  checkListOptions,
  checkName,
  checkTtl,
  compareCodePoints,
  decodeValue,
  encodeValue,
  returnedInteger,
  StoreError,
  StoreInvalidArgumentError,
} from "../errors.ts";
import type {
  ListOptions,
  LogEntry,
  Page,
  ReadLogOptions,
  Store,
  StoredItem,
  StoreHealth,
  WriteOptions,
} from "../store.ts";
import { RedisConnection, type RedisConnectionOptions } from "./connection.ts";
import { APPEND, APPEND_MANY, COUNT, DELETE, PRUNE, WRITE } from "./scripts.ts";

export interface RedisStoreOptions extends RedisConnectionOptions {
  /** `redis://[user:password@]host:port/db` or `rediss://…`. */
  readonly url: string;
  /** Prefix of every key this store touches. Default `authority:`. */
  readonly keyPrefix?: string;
  /** How long health() waits for PING, ms. Default 1000. */
  readonly healthTimeoutMs?: number;
}

const KEY_PREFIX_PATTERN = /^[A-Za-z0-9_.:{}-]{0,128}$/;

const toInteger = (value: unknown, what: string): number => returnedInteger(value, "Redis", what);

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
    const healthTimeoutMs = options.healthTimeoutMs ?? 1000;
    if (!Number.isSafeInteger(healthTimeoutMs) || healthTimeoutMs < 1) {
      throw new StoreInvalidArgumentError("healthTimeoutMs must be a positive integer.");
    }
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
    const args = this.#writeArgs(collection, id, value, options, false);
    return this.#connection.run("put", async (client) => {
      await this.#connection.script(client, WRITE, args);
    });
  }

  async create<T>(collection: string, id: string, value: T, options?: WriteOptions): Promise<boolean> {
    const args = this.#writeArgs(collection, id, value, options, true);
    return this.#connection.run("create", async (client) => {
      return toInteger(await this.#connection.script(client, WRITE, args), "create result") === 1;
    });
  }

  #writeArgs(
    collection: string,
    id: string,
    value: unknown,
    options: WriteOptions | undefined,
    onlyIfAbsent: boolean,
  ): string[] {
    const name = checkName("collection", collection);
    const docId = checkId("id", id);
    const ttl = checkTtl(options);
    return [
      ...this.#collectionKeys(name, docId),
      docId,
      encodeValue(value),
      ttl === undefined ? "" : String(ttl),
      onlyIfAbsent ? "1" : "0",
      this.#docPrefix(name),
    ];
  }

  async delete(collection: string, id: string): Promise<boolean> {
    const name = checkName("collection", collection);
    const docId = checkId("id", id);
    return this.#connection.run("delete", async (client) => {
      const removed = await this.#connection.script(client, DELETE, [
        ...this.#collectionKeys(name, docId),
        docId,
      ]);
      return toInteger(removed, "delete result") === 1;
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

  #logKeys(log: string): [string, string] {
    const name = checkName("log", log);
    return [`${this.keyPrefix}logseq:${name}`, `${this.keyPrefix}log:${name}`];
  }

  async append<T>(log: string, value: T): Promise<number> {
    const keys = this.#logKeys(log);
    const text = encodeValue(value);
    return this.#connection.run("append", async (client) => {
      return toInteger(await this.#connection.script(client, APPEND, [...keys, text]), "seq");
    });
  }

  async appendMany<T>(log: string, values: readonly T[]): Promise<number[]> {
    const keys = this.#logKeys(log);
    const texts = values.map((value) => encodeValue(value));
    if (texts.length === 0) return [];
    return this.#connection.run("append", async (client) => {
      const first = toInteger(await this.#connection.script(client, APPEND_MANY, [...keys, ...texts]), "seq");
      return texts.map((_, i) => first + i);
    });
  }

  async readLog<T>(log: string, options?: ReadLogOptions): Promise<LogEntry<T>[]> {
    const [, listKey] = this.#logKeys(log);
    const after = checkAfterSeq(options);
    const limit = checkLimit(options?.limit);
    return this.#connection.run("readLog", async (client) => {
      // Entry with seq n sits at index n-1.
      const raw = await client.lrange(listKey, after, after + limit - 1);
      const entries: LogEntry<T>[] = [];
      for (const line of raw) {
        const space = line.indexOf(" ");
        if (space < 1) throw new StoreError("Redis log entry is malformed.");
        const seq = toInteger(line.slice(0, space), "seq");
        if (seq > after) entries.push({ seq, value: decodeValue<T>(line.slice(space + 1)) });
      }
      return entries;
    });
  }

  async logLength(log: string): Promise<number> {
    const [, listKey] = this.#logKeys(log);
    return this.#connection.run("logLength", async (client) => client.llen(listKey));
  }

  async increment(counters: string, key: string, by?: number): Promise<number> {
    const hash = `${this.keyPrefix}ctr:${checkName("counters", counters)}`;
    const field = checkId("counter key", key);
    const amount = checkIncrement(by);
    return this.#connection.run("increment", async (client) => client.hincrby(hash, field, amount));
  }

  async readCounters(counters: string, prefix?: string): Promise<Record<string, number>> {
    const hash = `${this.keyPrefix}ctr:${checkName("counters", counters)}`;
    const wanted = checkListOptions(prefix === undefined ? undefined : { prefix }).prefix ?? "";
    return this.#connection.run("readCounters", async (client) => {
      const all = await client.hgetall(hash);
      const keys = Object.keys(all)
        .filter((key) => key.startsWith(wanted))
        .sort(compareCodePoints);
      const result: Record<string, number> = {};
      for (const key of keys) result[key] = toInteger(all[key], "counter");
      return result;
    });
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
