/**
 * Lua scripts: each runs atomically on the server, so a document and its index entries,
 * or a log entry and its seq, never disagree whatever other clients do at the same time.
 *
 * Per collection: KEYS[1] document key, KEYS[2] index (sorted set, score 0, ordered by id),
 * KEYS[3] expiry schedule (sorted set, score = expiry time in ms, ids with a TTL only).
 * The expiry sweep reads document keys built from a prefix (ARGV) rather than declared
 * in KEYS; that is fine on a standalone server or a primary with replicas, not Redis Cluster.
 */
import { luaScript } from "./connection.ts";

/** Server time in ms: one clock for every writer, whatever the clients' clocks say. */
const NOW = `
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
`;

/**
 * Moves up to `max` ids whose scheduled expiry has passed: gone documents leave both sets,
 * documents that still live (rewritten with a longer TTL) are rescheduled. Every id it
 * looks at leaves the range, so calling it in a loop terminates.
 */
const SWEEP = `
local function sweep(idx, exp, doc_prefix, now, max)
  local ids = redis.call('ZRANGEBYSCORE', exp, '-inf', now, 'LIMIT', 0, max)
  for _, id in ipairs(ids) do
    local pttl = redis.call('PTTL', doc_prefix .. id)
    if pttl == -2 then
      redis.call('ZREM', idx, id)
      redis.call('ZREM', exp, id)
    elseif pttl == -1 then
      redis.call('ZREM', exp, id)
    else
      redis.call('ZADD', exp, string.format('%d', now + math.max(pttl, 1)), id)
    end
  end
  return #ids
end
`;

/**
 * put and create. ARGV: id, json, ttl ms ('' = none), '1' for create-if-absent, document
 * key prefix. SET NX treats an expired key as absent, so create over an expired document wins.
 * A write with a TTL also sweeps a few expired ids, so collections that are only written
 * and read by id (nonces, sessions) do not grow their index forever.
 */
export const WRITE = luaScript(
  `${NOW}${SWEEP}
local ttl = tonumber(ARGV[3])
local ok
if ttl then
  if ARGV[4] == '1' then
    ok = redis.call('SET', KEYS[1], ARGV[2], 'PX', ttl, 'NX')
  else
    ok = redis.call('SET', KEYS[1], ARGV[2], 'PX', ttl)
  end
else
  if ARGV[4] == '1' then
    ok = redis.call('SET', KEYS[1], ARGV[2], 'NX')
  else
    ok = redis.call('SET', KEYS[1], ARGV[2])
  end
end
if not ok then
  return 0
end
redis.call('ZADD', KEYS[2], 0, ARGV[1])
if ttl then
  local now = now_ms()
  redis.call('ZADD', KEYS[3], string.format('%d', now + ttl), ARGV[1])
  sweep(KEYS[2], KEYS[3], ARGV[5], now, 16)
else
  redis.call('ZREM', KEYS[3], ARGV[1])
end
return 1
`,
  3,
);

/** ARGV: id. Returns 1 when a document was removed. */
export const DELETE = luaScript(
  `
local removed = redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
return removed
`,
  3,
);

/**
 * Drops an id from the index when its document is gone (expired). Checked inside the
 * script so a concurrent put of the same id is never un-indexed.
 */
export const PRUNE = luaScript(
  `
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('ZREM', KEYS[3], ARGV[1])
  return 1
end
return 0
`,
  3,
);

/** KEYS: index, expiry schedule. ARGV: document key prefix. Sweeps everything due, then counts. */
export const COUNT = luaScript(
  `${NOW}${SWEEP}
local now = now_ms()
while sweep(KEYS[1], KEYS[2], ARGV[1], now, 500) == 500 do end
return redis.call('ZCARD', KEYS[1])
`,
  2,
);

/**
 * KEYS: seq counter, entry list. ARGV: json. The entry is stored as "<seq> <json>" at list
 * index seq-1; INCR and RPUSH in one script keep both in step under concurrent writers.
 */
export const APPEND = luaScript(
  `
local seq = redis.call('INCR', KEYS[1])
redis.call('RPUSH', KEYS[2], string.format('%d', seq) .. ' ' .. ARGV[1])
return seq
`,
  2,
);

/**
 * KEYS: seq counter, entry list. ARGV: json values. Appends them in order under consecutive
 * seqs (one INCRBY); returns the first seq.
 */
export const APPEND_MANY = luaScript(
  `
local last = redis.call('INCRBY', KEYS[1], #ARGV)
local first = last - #ARGV + 1
for i = 1, #ARGV do
  redis.call('RPUSH', KEYS[2], string.format('%d', first + i - 1) .. ' ' .. ARGV[i])
end
return first
`,
  2,
);
