"""The quota script as released before keys expired whole and configured limits won
(sluice at aae28f4), kept to check that keys it left in Redis read safely.

It stored each window's limit in the window (``l``, set once with ``HSETNX``) and listed
learned windows in ``:m`` (``lw``), which had no TTL. Tests run it to make such keys; nothing
else may use it.
"""

from __future__ import annotations

__all__ = ["PREVIOUS_QUOTA_SCRIPT"]

PREVIOUS_QUOTA_SCRIPT = r"""
local P = KEYS[1]
local req = cjson.decode(ARGV[1])
local now = req.now
if now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) + tonumber(t[2]) / 1000000
end
local function fmt(x) return string.format('%.17g', x) end
local function qbase(q) return P .. ':q:' .. q end
local function wkey(q, dim, per) return qbase(q) .. ':w:' .. dim .. ':' .. per end

local function expire(w, period)
  local o = w .. ':o'
  local horizon = now - period
  local used = tonumber(redis.call('HGET', w, 'u') or '0')
  local changed = false
  while true do
    local id = redis.call('LINDEX', o, 0)
    if not id then break end
    local at = tonumber(redis.call('HGET', w, 'a' .. id))
    if at > horizon then break end
    used = used - tonumber(redis.call('HGET', w, 'n' .. id))
    redis.call('LPOP', o)
    redis.call('HDEL', w, 'a' .. id, 'n' .. id)
    changed = true
  end
  if changed then redis.call('HSET', w, 'u', used) end
  return used
end

local function next_free(w, period, limit, amount)
  local used = expire(w, period)
  local excess = used + amount - limit
  if excess <= 0 then return now end
  local ids = redis.call('LRANGE', w .. ':o', 0, -1)
  local items = {}
  for i, id in ipairs(ids) do
    local v = redis.call('HMGET', w, 'a' .. id, 'n' .. id)
    items[i] = {tonumber(v[1]), tonumber(v[2])}
  end
  table.sort(items, function(x, y) return x[1] < y[1] or (x[1] == y[1] and x[2] < y[2]) end)
  local freed = 0
  for _, item in ipairs(items) do
    freed = freed + item[2]
    if freed >= excess then return math.max(now, item[1] + period) end
  end
  return now + period
end

local function touch(w, period)
  local ms = math.ceil(period * 1000) * 2 + 600000
  redis.call('PEXPIRE', w, ms)
  redis.call('PEXPIRE', w .. ':o', ms)
end

-- The key's windows: the configured ones, then those learned from headers (in learned order).
local function windows(q, specs)
  local out = {}
  local seen = {}
  for _, s in ipairs(specs) do
    local w = wkey(q, s[1], s[2])
    redis.call('HSETNX', w, 'l', s[3])
    out[#out + 1] = {s[1], s[2], w}
    seen[s[1] .. ':' .. s[2]] = true
  end
  local learned = redis.call('HGET', qbase(q) .. ':m', 'lw')
  if learned then
    for slot in string.gmatch(learned, '[^,]+') do
      if not seen[slot] then
        local dim, per = string.match(slot, '^(.-):(.*)$')
        out[#out + 1] = {dim, per, wkey(q, dim, per)}
        seen[slot] = true
      end
    end
  end
  return out
end

local function amount_of(cost, dim)
  if dim == 'requests' then return cost[1] end
  if dim == 'input_tokens' then return cost[2] end
  if dim == 'output_tokens' then return cost[3] end
  return cost[2] + cost[3]
end

local function release(q, id, which)
  redis.call('ZREM', qbase(q) .. ':' .. which, id)
end

local function settle_budget(hid, micros, tokens)
  local d = redis.call('HGET', P .. ':bd', hid)
  if not d then return end
  local held_m, held_t, names = string.match(d, '^(%d+)|(%d+)|(.*)$')
  held_m = tonumber(held_m)
  held_t = tonumber(held_t)
  if micros < 0 then micros = held_m; tokens = held_t end
  for name in string.gmatch(names, '[^\n]+') do
    local a = P .. ':b:' .. name
    redis.call('HINCRBY', a, 'rm', -held_m)
    redis.call('HINCRBY', a, 'rt', -held_t)
    redis.call('HINCRBY', a, 'sm', micros)
    redis.call('HINCRBY', a, 'st', tokens)
  end
  redis.call('HDEL', P .. ':bd', hid)
  redis.call('ZREM', P .. ':bh', hid)
end

-- Queued work first, in the order it happened.
for _, op in ipairs(req.ops or {}) do
  local kind = op[1]
  if kind == 's' then
    -- settle: {'s', key, id, {{dim, per, actual}, ...}}
    for _, e in ipairs(op[4]) do
      local w = wkey(op[2], e[1], e[2])
      local field = 'n' .. op[3]
      local old = redis.call('HGET', w, field)
      if old then
        redis.call('HINCRBY', w, 'u', e[3] - tonumber(old))
        redis.call('HSET', w, field, e[3])
      end
    end
  elseif kind == 'r' then
    -- redate: {'r', key, id, {{dim, per}, ...}, at (-1: now)}; frees the pending slot
    local at = op[5]
    if at < 0 then at = now end
    for _, e in ipairs(op[4]) do
      local w = wkey(op[2], e[1], e[2])
      local old = redis.call('HGET', w, 'a' .. op[3])
      if old and at > tonumber(old) then redis.call('HSET', w, 'a' .. op[3], fmt(at)) end
    end
    release(op[2], op[3], 'p')
  elseif kind == 'e' then
    -- end of an attempt: {'e', key, id}; frees both slots
    release(op[2], op[3], 'p')
    release(op[2], op[3], 's')
  elseif kind == 'b' then
    -- budget settlement: {'b', hold id, micros, tokens} (-1: charge the whole hold)
    settle_budget(op[2], op[3], op[4])
  elseif kind == 'h' then
    -- renew held slots and budget holds: {'h', lapse seconds, {{key, id}, ...}, {hold ids}}
    local lapse = now + op[2]
    for _, held in ipairs(op[3]) do
      redis.call('ZADD', qbase(held[1]) .. ':p', 'XX', lapse, held[2])
      redis.call('ZADD', qbase(held[1]) .. ':s', 'XX', lapse, held[2])
    end
    for _, hid in ipairs(op[4]) do redis.call('ZADD', P .. ':bh', 'XX', lapse, hid) end
  end
end

local what = req.op
if what == 'flush' then
  return {'ok', fmt(now)}
end

local q = req.q
local cdkey = qbase(q) .. ':cd'

if what == 'cooldown' then
  local untl = now + req.seconds
  local old = tonumber(redis.call('GET', cdkey) or '-1e308')
  if old > untl then untl = old end
  redis.call('SET', cdkey, fmt(untl), 'PX', math.ceil((untl - now) * 1000) + 1000)
  return {'ok', fmt(now), fmt(untl)}
end

if what == 'learn' then
  local ws = windows(q, req.specs)
  local index = {}
  for _, w in ipairs(ws) do index[w[1] .. ':' .. w[2]] = w end
  for _, item in ipairs(req.learned) do
    -- {dim, limit, remaining, reset}; -1 means not reported
    local dim, limit, remaining, reset = item[1], item[2], item[3], item[4]
    local slot = dim .. ':' .. req.per
    local entry = index[slot]
    local go = true
    if not entry then
      if limit < 1 then
        go = false
      else
        local w = wkey(q, dim, req.per)
        redis.call('HSET', w, 'l', limit, 'u', 0)
        redis.call('DEL', w .. ':o')
        touch(w, tonumber(req.per))
        local m = qbase(q) .. ':m'
        local lw = redis.call('HGET', m, 'lw')
        redis.call('HSET', m, 'lw', (lw and (lw .. ',') or '') .. slot)
        entry = {dim, req.per, w}
        index[slot] = entry
      end
    else
      local current = tonumber(redis.call('HGET', entry[3], 'l'))
      if limit >= 1 and limit < current then redis.call('HSET', entry[3], 'l', limit) end
    end
    if go and remaining >= 0 then
      local w = entry[3]
      local period = tonumber(entry[2])
      local used = expire(w, period)
      local believed = math.max(0, tonumber(redis.call('HGET', w, 'l')) - used)
      local extra = believed - remaining
      if extra > 0 then
        if reset < 0 then reset = period end
        local at = now + math.min(reset, period) - period
        local o = w .. ':o'
        local ids = redis.call('LRANGE', o, 0, -1)
        local index_at = #ids
        while index_at > 0 and tonumber(redis.call('HGET', w, 'a' .. ids[index_at])) > at do
          index_at = index_at - 1
        end
        local id = 'x' .. redis.call('HINCRBY', qbase(q) .. ':m', 'seq', 1)
        if index_at == #ids then
          redis.call('RPUSH', o, id)
        else
          redis.call('LINSERT', o, 'BEFORE', ids[index_at + 1], id)
        end
        redis.call('HSET', w, 'a' .. id, fmt(at), 'n' .. id, extra)
        redis.call('HINCRBY', w, 'u', extra)
        touch(w, period)
      end
    end
  end
  return {'ok', fmt(now)}
end

-- what == 'reserve'
local cd = tonumber(redis.call('GET', cdkey) or '-1e308')
if cd > now then
  return {'wait', fmt(now), fmt(cd - now), 'cooldown', fmt(cd)}
end
local cost = req.cost
local ws = windows(q, req.specs)
local ready = now
for _, w in ipairs(ws) do
  local limit = tonumber(redis.call('HGET', w[3], 'l'))
  local amount = amount_of(cost, w[1])
  if amount > limit then
    return {'large', fmt(now), w[1], amount, limit, w[2]}
  end
  local at = next_free(w[3], tonumber(w[2]), limit, amount)
  if at > ready then ready = at end
end
if ready > now then
  return {'wait', fmt(now), fmt(ready - now), 'window'}
end
-- Slots shared by every process: {pending cap, open-stream cap} (-1: none).
local base = qbase(q)
local caps = req.caps
if caps[1] >= 0 or caps[2] >= 0 then
  for i, which in ipairs({'p', 's'}) do
    if caps[i] >= 0 then
      redis.call('ZREMRANGEBYSCORE', base .. ':' .. which, '-inf', now)
      if redis.call('ZCARD', base .. ':' .. which) >= caps[i] then
        local first = redis.call('ZRANGE', base .. ':' .. which, 0, 0, 'WITHSCORES')
        local lapse = tonumber(first[2]) - now
        return {'wait', fmt(now), fmt(math.min(req.poll, lapse)), 'slots'}
      end
    end
  end
end
-- Budgets: {hold id, micros, tokens, {{account, max micros, max tokens}, ...}} (-1: no max).
local b = req.budget
if b then
  local lapsed = redis.call('ZRANGEBYSCORE', P .. ':bh', '-inf', now)
  for _, hid in ipairs(lapsed) do settle_budget(hid, -1, -1) end
  local wait = false
  for _, acct in ipairs(b[4]) do
    local a = redis.call('HMGET', P .. ':b:' .. acct[1], 'sm', 'st', 'rm', 'rt')
    local sm, st = tonumber(a[1] or '0'), tonumber(a[2] or '0')
    local rm, rt = tonumber(a[3] or '0'), tonumber(a[4] or '0')
    if acct[2] >= 0 then
      local left = acct[2] - sm
      if b[2] > left then return {'budget', fmt(now), acct[1], 'usd', left} end
      if b[2] > left - rm then wait = true end
    end
    if acct[3] >= 0 then
      local left = acct[3] - st
      if b[3] > left then return {'budget', fmt(now), acct[1], 'tokens', left} end
      if b[3] > left - rt then wait = true end
    end
  end
  if wait then return {'wait', fmt(now), fmt(req.poll), 'budget'} end
  local names = {}
  for _, acct in ipairs(b[4]) do
    redis.call('HINCRBY', P .. ':b:' .. acct[1], 'rm', b[2])
    redis.call('HINCRBY', P .. ':b:' .. acct[1], 'rt', b[3])
    names[#names + 1] = acct[1]
  end
  redis.call('HSET', P .. ':bd', b[1], b[2] .. '|' .. b[3] .. '|' .. table.concat(names, '\n'))
  redis.call('ZADD', P .. ':bh', now + req.lapse, b[1])
end
local id = tostring(redis.call('HINCRBY', base .. ':m', 'seq', 1))
local slots = {}
for _, w in ipairs(ws) do
  local amount = amount_of(cost, w[1])
  redis.call('RPUSH', w[3] .. ':o', id)
  redis.call('HSET', w[3], 'a' .. id, fmt(now), 'n' .. id, amount)
  redis.call('HINCRBY', w[3], 'u', amount)
  touch(w[3], tonumber(w[2]))
  slots[#slots + 1] = w[1] .. ':' .. w[2]
end
if caps[1] >= 0 then redis.call('ZADD', base .. ':p', now + req.lapse, id) end
if caps[2] >= 0 then redis.call('ZADD', base .. ':s', now + req.lapse, id) end
return {'ok', fmt(now), id, table.concat(slots, ',')}
"""
