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
 * True when the live document at `key` is a JSON object whose top-level `field` is the string
 * `equals` (putIfMatch, deleteIfMatch). GET never returns an expired key.
 */
const MATCHES = `
local function matches(key, field, equals)
  local text = redis.call('GET', key)
  if not text then
    return false
  end
  local decoded, doc = pcall(cjson.decode, text)
  return decoded and type(doc) == 'table' and doc[field] == equals
end
`;

/**
 * put, create and putIfMatch. ARGV: id, json, ttl ms ('' = none), mode ('0' put, '1'
 * create-if-absent, '2' only while the document matches ARGV[6], ARGV[7]), document key
 * prefix. SET NX treats an expired key as absent, so create over an expired document wins.
 * A write with a TTL also sweeps a few expired ids, so collections that are only written
 * and read by id (nonces, sessions) do not grow their index forever.
 */
export const WRITE = luaScript(
  `${NOW}${SWEEP}${MATCHES}
if ARGV[4] == '2' and not matches(KEYS[1], ARGV[6], ARGV[7]) then
  return 0
end
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

/**
 * ARGV: id, and for deleteIfMatch the field and the string it must hold. Returns 1 when a
 * document was removed.
 */
export const DELETE = luaScript(
  `${MATCHES}
if ARGV[2] and not matches(KEYS[1], ARGV[2], ARGV[3]) then
  return 0
end
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

/** How many index keys each appended or trimmed entry carries (log-query.ts LOG_INDEX_FIELDS). */
export const INDEX_KEYS_PER_ENTRY = 5;

/**
 * KEYS: seq counter, entry list, time index, id hash. ARGV: n, then per entry its json, its
 * time (15 digits), its id ('' when it has none) and INDEX_KEYS_PER_ENTRY field-index keys
 * ('' when the field is not indexed).
 * An entry whose id the hash holds is not written: its seq is the stored one's (decision 2751;
 * one HGET per entry, atomic with the write). The others get consecutive seqs in order, at
 * list index seq-1-trimmed, their id → seq in the hash, and `<time>:<seq 16 digits>` in the
 * time index and each field index (sorted sets, score 0, ordered by member). Returns each
 * entry's seq.
 */
export const APPEND_MANY = luaScript(
  `
local n = tonumber(ARGV[1])
local per = 3 + ${INDEX_KEYS_PER_ENTRY}
local seqs = {}
for i = 0, n - 1 do
  local base = 2 + i * per
  local id = ARGV[base + 2]
  local held = false
  if id ~= '' then held = redis.call('HGET', KEYS[4], id) end
  if held then
    seqs[i + 1] = tonumber(held)
  else
    local seq = redis.call('INCR', KEYS[1])
    local member = ARGV[base + 1] .. ':' .. string.format('%016d', seq)
    redis.call('RPUSH', KEYS[2], string.format('%d', seq) .. ' ' .. ARGV[base])
    redis.call('ZADD', KEYS[3], 0, member)
    if id ~= '' then redis.call('HSET', KEYS[4], id, seq) end
    for f = base + 3, base + per - 1 do
      if ARGV[f] ~= '' then redis.call('ZADD', ARGV[f], 0, member) end
    end
    seqs[i + 1] = seq
  end
end
return seqs
`,
  4,
);

/**
 * KEYS: entry list, trimmed count. ARGV: seq after which to read, how many. The list starts
 * at the first entry not trimmed, so the entry with seq n sits at index n-1-trimmed.
 */
export const READ_LOG = luaScript(
  `
local trimmed = tonumber(redis.call('GET', KEYS[2]) or '0')
local start = math.max(tonumber(ARGV[1]) - trimmed, 0)
return redis.call('LRANGE', KEYS[1], start, start + tonumber(ARGV[2]) - 1)
`,
  2,
);

/**
 * KEYS: entry list, trimmed count. ARGV: lower and upper ZRANGEBYLEX bounds, limit, budget,
 * the number of candidate index keys, those keys, then (field, value) pairs every match
 * must have.
 * Scans the smallest candidate index from the lower bound, checks each entry against every
 * condition, and stops after limit+1 matches or `budget` index members: bounded work per
 * call. Returns { done (1/0), last member examined, member, json, member, json, … }.
 */
export const QUERY_LOG = luaScript(
  `
local trimmed = tonumber(redis.call('GET', KEYS[2]) or '0')
local candidates = tonumber(ARGV[5])
local driver = ARGV[6]
local smallest = redis.call('ZCARD', driver)
for i = 7, 5 + candidates do
  local size = redis.call('ZCARD', ARGV[i])
  if size < smallest then driver = ARGV[i]; smallest = size end
end
local limit = tonumber(ARGV[3])
local budget = tonumber(ARGV[4])
local conditions = {}
for i = 6 + candidates, #ARGV, 2 do conditions[#conditions + 1] = { ARGV[i], ARGV[i + 1] } end
local out = { 0, '' }
local found = 0
local examined = 0
local lower = ARGV[1]
while true do
  local chunk = redis.call('ZRANGEBYLEX', driver, lower, ARGV[2], 'LIMIT', 0, math.min(100, budget - examined))
  if #chunk == 0 then out[1] = 1; return out end
  for _, member in ipairs(chunk) do
    examined = examined + 1
    out[2] = member
    local index = tonumber(string.sub(member, 17)) - 1 - trimmed
    local line = index >= 0 and redis.call('LINDEX', KEYS[1], index)
    if line then
      local json = string.sub(line, (string.find(line, ' ', 1, true) or 0) + 1)
      local ok, value = pcall(cjson.decode, json)
      local match = ok and type(value) == 'table'
      if match then
        for _, condition in ipairs(conditions) do
          local field = value[condition[1]]
          if type(field) ~= 'string' or field ~= condition[2] then match = false; break end
        end
      end
      if match then
        out[#out + 1] = member
        out[#out + 1] = json
        found = found + 1
        if found > limit then return out end
      end
    end
    if examined >= budget then return out end
  end
  lower = '(' .. out[2]
end
`,
  2,
);

/**
 * KEYS: entry list, trimmed count, time index, id hash. ARGV: n, the seq the list must start
 * with (another replica may have trimmed first: then nothing happens), then per entry its
 * member, its id ('' when none) and INDEX_KEYS_PER_ENTRY index keys. Removes the n oldest
 * entries, their index members and ids; returns how many it removed.
 */
export const TRIM_LOG = luaScript(
  `
local n = tonumber(ARGV[1])
local head = redis.call('LINDEX', KEYS[1], 0)
if not head or string.sub(head, 1, #ARGV[2] + 1) ~= ARGV[2] .. ' ' then return 0 end
local per = 2 + ${INDEX_KEYS_PER_ENTRY}
for i = 0, n - 1 do
  local base = 3 + i * per
  redis.call('ZREM', KEYS[3], ARGV[base])
  if ARGV[base + 1] ~= '' then redis.call('HDEL', KEYS[4], ARGV[base + 1]) end
  for f = base + 2, base + per - 1 do
    if ARGV[f] ~= '' then redis.call('ZREM', ARGV[f], ARGV[base]) end
  end
end
redis.call('LTRIM', KEYS[1], n, -1)
redis.call('INCRBY', KEYS[2], n)
return n
`,
  4,
);

/**
 * KEYS: counter hash, its key index (sorted set, score 0). ARGV: key, increment. The counter and
 * its index member are written together, so a prefix of keys is read by range, never by scanning
 * the hash.
 */
export const COUNTER_INCREMENT = luaScript(
  `
local value = redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], 'NX', 0, ARGV[1])
return value
`,
  2,
);

/**
 * KEYS: counter hash, its key index. ARGV: lex range start ('-' or '[<lower>'), end
 * ('(<upper>'), max. Removes up to max counters in key order within the range from both;
 * returns how many counters it removed.
 */
export const DELETE_COUNTERS = luaScript(
  `
local keys = redis.call('ZRANGEBYLEX', KEYS[2], ARGV[1], ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
local removed = 0
for i = 1, #keys, 1000 do
  local chunk = { unpack(keys, i, math.min(i + 999, #keys)) }
  removed = removed + redis.call('HDEL', KEYS[1], unpack(chunk))
  redis.call('ZREM', KEYS[2], unpack(chunk))
end
return removed
`,
  2,
);
