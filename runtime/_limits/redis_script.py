"""The Lua script behind :class:`~sluice._limits.redis_store.RedisQuotaStore`.

One script serves every operation so that each round trip is one atomic step: it first applies
the settlements, re-datings and slot releases the process has queued since its last call, then
does what was asked (admit, cool down, learn, read windows, or nothing but the queued work).
An admission's answer (and a wait for a window) carries the key's windows' use and limits, the
caller's view of them for statistics. Its window logic
mirrors :class:`~sluice._limits.window.Window` step for step (the same entries in the same order,
expired by the same rule, the same answer for the next free time), and its limits mirror
:class:`~sluice._limits.store.MemoryQuotaStore` (configured limits sent with every call, lowered
by learned ones while fresh), which is what lets the property test hold it to admitting at
exactly the times the in-memory store does.

Layout, all under one hash tag (``{prefix}``) so a Redis Cluster keeps a deployment in one slot:

* ``{p}:q:<key>:w:<dimension>:<period>``: a window's hash: ``u`` units used, and per entry
  ``a<id>`` (when it counts from) and ``n<id>`` (its amount); ``...:o`` lists the entry ids in
  the window's order (admission order, see Window), ``...:t`` holds them scored by ``a`` (the
  time order the next-free walk needs, kept as entries arrive instead of sorted per check).
* ``{p}:q:<key>:m``: the key's hash: ``seq`` (reservation ids).
* ``{p}:q:<key>:L``: limits learned from headers, ``<dimension>:<period>`` to
  ``"<limit> <until>"``; a limit is ignored (and dropped) once ``until`` has passed.
* ``{p}:q:<key>:cd``: the end of its cooldown; ``{p}:q:<key>:p`` / ``:s``: sorted sets of the
  pending / open-stream slots held, scored by when the hold lapses (a process killed with
  ``kill -9`` stops renewing its holds, so they lapse).
* ``{p}:cds``: every key cooling down, scored by the end of its cooldown (what a process reads
  to route around other processes' cooldowns without asking per call); entries past their end
  are dropped as it is read or written, and it expires with the last cooldown.
* ``{p}:avoid``: names routing should pass over (a deployment marked slow, a breaker opened by
  some process), scored by when that ends; kept like ``{p}:cds``.
* ``{p}:b:<account>``: a budget account's hash (``sm``/``st`` spent, ``rm``/``rt`` reserved,
  ``v`` set once an admission made it, ``r`` the run id it was made under; after lost
  history, the rebuild's floor ``fm``/``ft``,
  each process's own spend ``cm<id>``/``ct<id>`` and the rebuilt base ``bm``/``bt``);
  ``{p}:bh``: budget holds by lapse time, ``{p}:bd``: each hold's accounts and amounts;
  ``{p}:bk:<id>``: a booking of spend made during an outage, applied once (kept a day);
  ``{p}:bx:<hold>``: a hold settled before it was taken, never to be taken (kept an hour).
* ``{p}:run``: the store's run id (see :mod:`sluice._limits.store_epoch`). A request that
  names another id is not served: the reply is ``epoch`` with the store's id. It keeps no
  TTL: a run id that expired could not be told from a store that lost its data.
* ``{p}:hk``: the quota keys whose slot sets may hold slots, for the ``sweep`` operation, which
  every process runs on a timer: it drops lapsed slots and charges lapsed budget holds without
  waiting for an admission to look, and answers when the next hold lapses.

Every key of a quota key has a TTL: a window's three keys expire ``2 * period + 600`` s after
the last entry was added (long after it left the window; a re-dating that would outlast that
renews them), the learned limits when the
last of them lapses, the slot sets a lapse after their last renewal, the cooldown when it ends,
and ``:m`` no earlier than anything holding its ids. So an idle key vanishes whole, and a key
missing any part reads as empty. Budget accounts are spending records and keep no TTL, nor
does the run id (one key per prefix); ``:hk`` lasts a lapse past the last hold renewed.

Keys written by older versions of this script read safely: a window's ``l`` field and
``:m``'s ``lw`` list (limits kept in Redis, learned limits never lapsing) are ignored, a window
without ``:t`` has it rebuilt from ``:o`` once, entries whose fields are gone count as gone,
and keys left without a TTL get one on their next write.

Numbers cross the boundary as JSON in (doubles parse exactly) and ``%.17g`` strings out (Lua
would truncate a returned number to an integer).
"""

from __future__ import annotations

from .store_epoch import EPOCH_LUA

__all__ = ["QUOTA_SCRIPT"]

QUOTA_SCRIPT = r"""
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

-- Give key k a TTL of at least ms (keys without one, from older versions, get one too).
local function extend(k, ms)
  local left = redis.call('PTTL', k)
  if left ~= -2 and left < ms then redis.call('PEXPIRE', k, ms) end
end

local function kept_ms(period) return math.ceil(period * 1000) * 2 + 600000 end

-- A window was written: its keys outlive its entries. Returns their TTL, which the key's id
-- counter (:m) must outlive too (the caller extends it).
local function touch(w, period)
  local ms = kept_ms(period)
  redis.call('PEXPIRE', w, ms)
  redis.call('PEXPIRE', w .. ':o', ms)
  redis.call('PEXPIRE', w .. ':t', ms)
  return ms
end

local function expire(w, period)
  local o = w .. ':o'
  local horizon = now - period
  local used = tonumber(redis.call('HGET', w, 'u') or '0') or 0
  local changed = false
  while true do
    local id = redis.call('LINDEX', o, 0)
    if not id then break end
    local v = redis.call('HMGET', w, 'a' .. id, 'n' .. id)
    local at = tonumber(v[1])
    if at and at > horizon then break end
    used = used - (tonumber(v[2]) or 0)
    redis.call('LPOP', o)
    redis.call('ZREM', w .. ':t', id)
    redis.call('HDEL', w, 'a' .. id, 'n' .. id)
    changed = true
  end
  if used ~= 0 and redis.call('LLEN', o) == 0 then
    used = 0  -- no entry left (or the list expired alone): nothing is counted
    changed = true
  end
  if changed then
    if used == 0 then redis.call('HDEL', w, 'u') else redis.call('HSET', w, 'u', used) end
  end
  return used
end

-- The time index of a window written by an older version (no :t) is built once from :o.
local function indexed(w)
  local o, t = w .. ':o', w .. ':t'
  if redis.call('ZCARD', t) == redis.call('LLEN', o) then return end
  redis.call('DEL', t)
  for _, id in ipairs(redis.call('LRANGE', o, 0, -1)) do
    local at = redis.call('HGET', w, 'a' .. id)
    if at then
      redis.call('ZADD', t, at, id)
    else
      redis.call('LREM', o, 0, id)
    end
  end
  local ms = redis.call('PTTL', o)
  if ms > 0 then redis.call('PEXPIRE', t, ms) end
end

-- The earliest time amount more units fit: walk the entries in time order until enough of
-- them have left the window (Window.next_free, with the order kept by :t).
local function next_free(w, period, limit, amount)
  local used = expire(w, period)
  local excess = used + amount - limit
  if excess <= 0 then return now end
  indexed(w)
  local freed = 0
  local start = 0
  while true do
    local ids = redis.call('ZRANGE', w .. ':t', start, start + 31)
    if #ids == 0 then break end
    for _, id in ipairs(ids) do
      local v = redis.call('HMGET', w, 'a' .. id, 'n' .. id)
      freed = freed + (tonumber(v[2]) or 0)
      if freed >= excess then return math.max(now, tonumber(v[1]) + period) end
    end
    start = start + 32
  end
  return now + period
end

-- A key last written by an older version (``:m`` without a TTL): its learned-window list is
-- dropped (learned limits there never lapsed; they are learned again from the next reply),
-- its windows made empty (by HSETNX) and its slot sets get a TTL, and ``:m`` one long enough
-- for any window.
local function migrate(q, specs)
  local base = qbase(q)
  local m = base .. ':m'
  if redis.call('PTTL', m) ~= -1 then return end
  redis.call('HDEL', m, 'lw')
  for _, s in ipairs(specs) do
    local w = wkey(q, s[1], s[2])
    if redis.call('PTTL', w) == -1 then touch(w, tonumber(s[2])) end  -- made by HSETNX
  end
  for _, which in ipairs({'p', 's'}) do
    local k = base .. ':' .. which
    if redis.call('PTTL', k) == -1 then
      local last = redis.call('ZRANGE', k, -1, -1, 'WITHSCORES')
      local ms = math.ceil(((tonumber(last[2]) or now) - now) * 1000) + 1000
      redis.call('PEXPIRE', k, math.max(1000, ms))
    end
  end
  redis.call('PEXPIRE', m, 86400000)
end

-- The key's windows and limits now: configured ones in their order (each lowered by a fresh
-- learned limit), then those only learned, in slot order. Lapsed learned limits are dropped.
local function windows(q, specs)
  migrate(q, specs)
  local limits, out = {}, {}
  for _, s in ipairs(specs) do
    local slot = s[1] .. ':' .. s[2]
    if limits[slot] == nil then
      out[#out + 1] = {s[1], s[2], wkey(q, s[1], s[2])}
      limits[slot] = s[3]
    elseif s[3] < limits[slot] then
      limits[slot] = s[3]
    end
  end
  local L = qbase(q) .. ':L'
  local learned = redis.call('HGETALL', L)
  local only = {}
  for i = 1, #learned, 2 do
    local slot = learned[i]
    local limit, untl = string.match(learned[i + 1], '^(%S+) (%S+)$')
    limit, untl = tonumber(limit), tonumber(untl)
    if not limit or not untl or untl <= now then
      redis.call('HDEL', L, slot)
    elseif limits[slot] ~= nil then
      if limit < limits[slot] then limits[slot] = limit end
    else
      local dim, per = string.match(slot, '^(.-):(.*)$')
      only[#only + 1] = {dim, per, wkey(q, dim, per)}
      limits[slot] = limit
    end
  end
  table.sort(only, function(x, y) return x[1] < y[1] or (x[1] == y[1] and x[2] < y[2]) end)
  for _, w in ipairs(only) do out[#out + 1] = w end
  for _, w in ipairs(out) do w[4] = limits[w[1] .. ':' .. w[2]] end
  return out
end

-- What the caller keeps as its view of windows ws (already expired): for each window,
-- 'dimension:period:used:limit', comma-separated.
local function usage_of(ws)
  local parts = {}
  for _, w in ipairs(ws) do
    local used = redis.call('HGET', w[3], 'u') or '0'
    parts[#parts + 1] = w[1] .. ':' .. w[2] .. ':' .. used .. ':' .. w[4]
  end
  return table.concat(parts, ',')
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

-- A slot set was written: it and the key's id counter last a lapse past now.
local function hold(q, which, lapse)
  local ms = math.ceil(lapse * 1000) + 1000
  extend(qbase(q) .. ':' .. which, ms)
  extend(qbase(q) .. ':m', ms)
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
    -- 0 - x, not -x: Lua writes -0 as "-0", which HINCRBY refuses (a hold of 0 tokens).
    redis.call('HINCRBY', a, 'rm', 0 - held_m)
    redis.call('HINCRBY', a, 'rt', 0 - held_t)
    redis.call('HINCRBY', a, 'sm', micros)
    redis.call('HINCRBY', a, 'st', tokens)
  end
  redis.call('HDEL', P .. ':bd', hid)
  redis.call('ZREM', P .. ':bh', hid)
end

-- Budgets after lost history, one account: {account, floor micros, floor tokens, own micros,
-- own tokens}. Spent becomes at least the highest floor any process reported (what it last
-- knew of the store, or the ledger's sum) and at least the sum of every process's own spend;
-- resent or repeated, nothing is counted twice (the floor is a maximum, a process's own spend
-- a field it overwrites, and only the rise of the base is added to spent).
-- An account written under another run id (``r``) kept its history (only the run id was
-- lost): it is left as it is, for every process, for the rest of this run (``kr``).
local function rebuild(e, pid, run)
  local a = P .. ':b:' .. e[1]
  local k = redis.call('HMGET', a, 'r', 'kr')
  if k[2] == run then return end
  if k[1] and k[1] ~= run then
    redis.call('HSET', a, 'kr', run, 'r', run)
    return
  end
  local f = redis.call('HMGET', a, 'fm', 'ft', 'bm', 'bt')
  local fm = math.max(tonumber(f[1] or '0'), e[2])
  local ft = math.max(tonumber(f[2] or '0'), e[3])
  redis.call('HSET', a, 'fm', fm, 'ft', ft, 'cm' .. pid, e[4], 'ct' .. pid, e[5], 'v', 1, 'r', run)
  local om, ot = 0, 0
  local all = redis.call('HGETALL', a)
  for i = 1, #all, 2 do
    local field = string.sub(all[i], 1, 2)
    if field == 'cm' then om = om + tonumber(all[i + 1]) end
    if field == 'ct' then ot = ot + tonumber(all[i + 1]) end
  end
  local bm = tonumber(f[3] or '0')
  local bt = tonumber(f[4] or '0')
  local tm, tt = math.max(fm, om), math.max(ft, ot)
  if tm > bm then
    redis.call('HINCRBY', a, 'sm', tm - bm)
    redis.call('HSET', a, 'bm', tm)
  end
  if tt > bt then
    redis.call('HINCRBY', a, 'st', tt - bt)
    redis.call('HSET', a, 'bt', tt)
  end
end

--@EPOCH@
local function serve()

-- Queued work first, in the order it happened.
for _, op in ipairs(req.ops or {}) do
  local kind = op[1]
  if kind == 's' then
    -- settle: {'s', key, id, {{dim, per, actual}, ...}}
    for _, e in ipairs(op[4]) do
      local w = wkey(op[2], e[1], e[2])
      local field = 'n' .. op[3]
      local old = tonumber(redis.call('HGET', w, field))
      if old then
        redis.call('HINCRBY', w, 'u', e[3] - old)
        redis.call('HSET', w, field, e[3])
      end
    end
  elseif kind == 'r' then
    -- redate: {'r', key, id, {{dim, per}, ...}, at (-1: now)}; frees the pending slot
    local at = op[5]
    if at < 0 then at = now end
    for _, e in ipairs(op[4]) do
      local w = wkey(op[2], e[1], e[2])
      local old = tonumber(redis.call('HGET', w, 'a' .. op[3]))
      if old and at > old then
        redis.call('HSET', w, 'a' .. op[3], fmt(at))
        redis.call('ZADD', w .. ':t', fmt(at), op[3])
        -- The entry now counts until at + period: the keys must live at least that long.
        local period = tonumber(e[2])
        if redis.call('PTTL', w) < math.ceil(period * 1000) + 1000 then
          extend(qbase(op[2]) .. ':m', touch(w, period))
        end
      end
    end
    release(op[2], op[3], 'p')
  elseif kind == 'e' then
    -- end of an attempt: {'e', key, id}; frees both slots
    release(op[2], op[3], 'p')
    release(op[2], op[3], 's')
  elseif kind == 'b' then
    -- budget settlement: {'b', hold id, micros, tokens} (-1: charge the whole hold). A hold
    -- not there is marked, so that if its reservation was late (a request the process gave
    -- up on, run by a server that was paused) it is not taken.
    if redis.call('HEXISTS', P .. ':bd', op[2]) == 1 then
      settle_budget(op[2], op[3], op[4])
    else
      redis.call('SET', P .. ':bx:' .. op[2], '1', 'EX', 3600)
    end
  elseif kind == 'h' then
    -- renew held slots and budget holds: {'h', lapse seconds, {{key, id}, ...}, {hold ids}}
    local lapse = now + op[2]
    for _, held in ipairs(op[3]) do
      for _, which in ipairs({'p', 's'}) do
        local k = qbase(held[1]) .. ':' .. which
        redis.call('ZADD', k, 'XX', lapse, held[2])
        if redis.call('ZSCORE', k, held[2]) then
          hold(held[1], which, op[2])
          extend(P .. ':hk', math.ceil(op[2] * 1000) + 1000)
        end
      end
    end
    for _, hid in ipairs(op[4]) do redis.call('ZADD', P .. ':bh', 'XX', lapse, hid) end
  elseif kind == 'k' then
    -- avoid a name for routing: {'k', name, seconds}; the later end wins
    local z = P .. ':avoid'
    redis.call('ZREMRANGEBYSCORE', z, '-inf', fmt(now))
    local untl = now + op[3]
    local old = tonumber(redis.call('ZSCORE', z, op[2]) or '-1e308') or -1e308
    if untl > old then redis.call('ZADD', z, fmt(untl), op[2]) end
    extend(z, math.ceil(op[3] * 1000) + 1000)
  elseif kind == 'B' then
    -- spend made during an outage, booked once: {'B', booking id, {{account, micros, tokens}}}
    if redis.call('SET', P .. ':bk:' .. op[2], '1', 'NX', 'EX', 86400) then
      for _, e in ipairs(op[3]) do
        redis.call('HINCRBY', P .. ':b:' .. e[1], 'sm', e[2])
        redis.call('HINCRBY', P .. ':b:' .. e[1], 'st', e[3])
      end
    end
  elseif kind == 'R' then
    -- budgets rebuilt after lost history: {'R', process id, {{account, ...}, ...}}
    for _, e in ipairs(op[3]) do rebuild(e, op[2], run) end
  end
end

local what = req.op
if what == 'flush' then
  return {'ok', fmt(now)}
end

-- A process tells a store that lost its history what it admitted itself in the last window:
-- {windows = {{key, dim, per, {{age, amount, id}, ...}}, ...}}, each window's entries oldest
-- first. They go to the head of the window's order (older than anything admitted since the
-- loss; entries of two processes interleaved there only leave later, an overcount). An entry
-- of an attempt under way keeps its reservation id (so its re-dating and settlement apply),
-- and the key's id counter moves past it; the others get ids of their own.
if what == 'seed' then
  for _, s in ipairs(req.windows) do
    local q, period = s[1], tonumber(s[3])
    local w = wkey(q, s[2], s[3])
    local m = qbase(q) .. ':m'
    local added, top = false, 0
    for i = #s[4], 1, -1 do
      local e = s[4][i]
      local at = now - e[1]
      if at > now - period and e[2] > 0 then
        local id = e[3]
        if id == '' then
          id = 'y' .. redis.call('HINCRBY', m, 'seq', 1)
        elseif (tonumber(id) or 0) > top then
          top = tonumber(id)
        end
        redis.call('LPUSH', w .. ':o', id)
        redis.call('HSET', w, 'a' .. id, fmt(at), 'n' .. id, e[2])
        redis.call('ZADD', w .. ':t', fmt(at), id)
        redis.call('HINCRBY', w, 'u', e[2])
        added = true
      end
    end
    if top > (tonumber(redis.call('HGET', m, 'seq')) or 0) then
      redis.call('HSET', m, 'seq', top)
    end
    if added then extend(m, touch(w, period)) end
  end
  return {'ok', fmt(now)}
end

if what == 'cooling' then
  -- Every key cooling down, then every name to avoid, with their ends:
  -- {'ok', now, n, key, until, ... (n pairs), name, until, ...}.
  local out = {'ok', fmt(now), 0}
  for part, z in ipairs({P .. ':cds', P .. ':avoid'}) do
    redis.call('ZREMRANGEBYSCORE', z, '-inf', fmt(now))
    local found = redis.call('ZRANGE', z, 0, -1, 'WITHSCORES')
    for i = 1, #found, 2 do
      out[#out + 1] = found[i]
      out[#out + 1] = fmt(tonumber(found[i + 1]))
    end
    if part == 1 then out[3] = #found / 2 end
  end
  return out
end

if what == 'peek' then
  -- Read only: the windows of several keys, {{key, specs}, ...}, one usage string each.
  local out = {'ok', fmt(now)}
  for _, k in ipairs(req.keys) do
    local ws = windows(k[1], k[2])
    for _, w in ipairs(ws) do expire(w[3], tonumber(w[2])) end
    out[#out + 1] = usage_of(ws)
  end
  return out
end

-- Lapsed holds of every key and budget go now; the reply says when the next one lapses
-- (-1: none is held).
if what == 'sweep' then
  local hk = P .. ':hk'
  local first = -1
  local function seen(k)
    local head = redis.call('ZRANGE', k, 0, 0, 'WITHSCORES')
    local at = tonumber(head[2])
    if at and (first < 0 or at < first) then first = at end
    return at ~= nil
  end
  for _, q in ipairs(redis.call('SMEMBERS', hk)) do
    local held = false
    for _, which in ipairs({'p', 's'}) do
      local k = qbase(q) .. ':' .. which
      redis.call('ZREMRANGEBYSCORE', k, '-inf', now)
      if seen(k) then held = true end
    end
    if not held then redis.call('SREM', hk, q) end
  end
  for _, hid in ipairs(redis.call('ZRANGEBYSCORE', P .. ':bh', '-inf', now)) do
    settle_budget(hid, -1, -1)
  end
  seen(P .. ':bh')
  return {'ok', fmt(now), fmt(first)}
end

local q = req.q
local cdkey = qbase(q) .. ':cd'

if what == 'cooldown' then
  migrate(q, {})
  local untl = now + req.seconds
  local old = tonumber(redis.call('GET', cdkey) or '-1e308') or -1e308
  if old > untl then untl = old end
  redis.call('SET', cdkey, fmt(untl), 'PX', math.ceil((untl - now) * 1000) + 1000)
  local cds = P .. ':cds'
  redis.call('ZREMRANGEBYSCORE', cds, '-inf', fmt(now))
  redis.call('ZADD', cds, fmt(untl), q)
  extend(cds, math.ceil((untl - now) * 1000) + 1000)
  return {'ok', fmt(now), fmt(untl)}
end

if what == 'learn' then
  local L = qbase(q) .. ':L'
  for _, item in ipairs(req.learned) do
    -- {dim, limit, remaining, reset}; -1 means not reported
    local dim, limit, remaining, reset = item[1], item[2], item[3], item[4]
    local slot = dim .. ':' .. req.per
    if limit >= 1 then
      -- The latest report wins, higher or lower; the configured limit still caps it.
      redis.call('HSET', L, slot, fmt(limit) .. ' ' .. fmt(now + req.keep))
      redis.call('PEXPIRE', L, math.ceil(req.keep * 1000) + 1000)
    end
    if remaining >= 0 then
      local entry = nil
      for _, w in ipairs(windows(q, req.specs)) do
        if w[1] == dim and w[2] == req.per then entry = w end
      end
      if entry then
        local w = entry[3]
        local period = tonumber(entry[2])
        local used = expire(w, period)
        local extra = math.max(0, entry[4] - used) - remaining
        if extra > 0 then
          if reset < 0 then reset = period end
          local at = now + math.min(reset, period) - period
          local o = w .. ':o'
          local ids = redis.call('LRANGE', o, 0, -1)
          local index_at = #ids
          while index_at > 0 do
            local before = tonumber(redis.call('HGET', w, 'a' .. ids[index_at])) or at
            if before <= at then break end
            index_at = index_at - 1
          end
          local id = 'x' .. redis.call('HINCRBY', qbase(q) .. ':m', 'seq', 1)
          if index_at == #ids then
            redis.call('RPUSH', o, id)
          else
            redis.call('LINSERT', o, 'BEFORE', ids[index_at + 1], id)
          end
          redis.call('HSET', w, 'a' .. id, fmt(at), 'n' .. id, extra)
          redis.call('ZADD', w .. ':t', fmt(at), id)
          redis.call('HINCRBY', w, 'u', extra)
          extend(qbase(q) .. ':m', touch(w, period))
        end
      end
    end
  end
  return {'ok', fmt(now)}
end

-- what == 'reserve'
local cd = tonumber(redis.call('GET', cdkey) or '-1e308') or -1e308
if cd > now then
  return {'wait', fmt(now), fmt(cd - now), 'cooldown', fmt(cd)}
end
local cost = req.cost
local ws = windows(q, req.specs)
local ready = now
for _, w in ipairs(ws) do
  local limit = w[4]
  local amount = amount_of(cost, w[1])
  if amount > limit then
    return {'large', fmt(now), w[1], amount, limit, w[2]}
  end
  local at = next_free(w[3], tonumber(w[2]), limit, amount)
  if at > ready then ready = at end
end
if ready > now then
  return {'wait', fmt(now), fmt(ready - now), 'window', usage_of(ws)}
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
-- Budgets: {hold id, micros, tokens, {{account, max micros, max tokens, known}, ...}}
-- (-1: no max; known: the process saw the account, so its hash must be there).
local b = req.budget
local balances = {}
if b and redis.call('EXISTS', P .. ':bx:' .. b[1]) == 1 then
  return {'wait', fmt(now), fmt(req.poll), 'budget', '', '[]'}  -- given up on (see 'b')
end
if b then
  local lapsed = redis.call('ZRANGEBYSCORE', P .. ':bh', '-inf', now)
  for _, hid in ipairs(lapsed) do settle_budget(hid, -1, -1) end
  local wait = false
  for _, acct in ipairs(b[4]) do
    local a = redis.call('HMGET', P .. ':b:' .. acct[1], 'sm', 'st', 'rm', 'rt', 'v')
    if acct[4] and not a[5] then return {'epoch', fmt(now), run, acct[1]} end
    local sm, st = tonumber(a[1] or '0'), tonumber(a[2] or '0')
    local rm, rt = tonumber(a[3] or '0'), tonumber(a[4] or '0')
    balances[#balances + 1] = {acct[1], sm, st, rm, rt}
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
  if wait then return {'wait', fmt(now), fmt(req.poll), 'budget', '', cjson.encode(balances)} end
  local names = {}
  for i, acct in ipairs(b[4]) do
    redis.call('HINCRBY', P .. ':b:' .. acct[1], 'rm', b[2])
    redis.call('HINCRBY', P .. ':b:' .. acct[1], 'rt', b[3])
    redis.call('HSET', P .. ':b:' .. acct[1], 'v', 1)
    redis.call('HSETNX', P .. ':b:' .. acct[1], 'r', run)
    balances[i][4] = balances[i][4] + b[2]
    balances[i][5] = balances[i][5] + b[3]
    names[#names + 1] = acct[1]
  end
  redis.call('HSET', P .. ':bd', b[1], b[2] .. '|' .. b[3] .. '|' .. table.concat(names, '\n'))
  redis.call('ZADD', P .. ':bh', now + req.lapse, b[1])
end
local id = tostring(redis.call('HINCRBY', base .. ':m', 'seq', 1))
local keep = math.ceil(req.lapse * 1000) + 1000
local slots, usage = {}, {}
for _, w in ipairs(ws) do
  local amount = amount_of(cost, w[1])
  redis.call('RPUSH', w[3] .. ':o', id)
  redis.call('ZADD', w[3] .. ':t', fmt(now), id)
  redis.call('HSET', w[3], 'a' .. id, fmt(now), 'n' .. id, amount)
  local used = redis.call('HINCRBY', w[3], 'u', amount)
  keep = math.max(keep, touch(w[3], tonumber(w[2])))
  slots[#slots + 1] = w[1] .. ':' .. w[2]
  usage[#usage + 1] = slots[#slots] .. ':' .. used .. ':' .. w[4]
end
extend(base .. ':m', keep)
for i, which in ipairs({'p', 's'}) do
  if caps[i] >= 0 then
    redis.call('ZADD', base .. ':' .. which, now + req.lapse, id)
    hold(q, which, req.lapse)
    redis.call('SADD', P .. ':hk', q)
    extend(P .. ':hk', math.ceil(req.lapse * 1000) + 1000)
  end
end
return {'ok', fmt(now), id, table.concat(slots, ','), table.concat(usage, ','),
  cjson.encode(balances)}
end

local reply = serve()
if req.run == '' then reply[#reply + 1] = 'run:' .. run end
return reply
""".replace("--@EPOCH@\n", EPOCH_LUA)
