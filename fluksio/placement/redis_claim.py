"""The Lua of a claim in its turn, and of the list of who waits: each one script, one round trip, atomic.

``CLAIM`` is ``turns`` (the order of waiting calls, backfill that never overtakes) played in Redis for
every driver on every host: keep the two alike. Who waits lives in four places, always changed
together by these scripts: the waiting hash (call id → JSON: run_id, node, reason, since, priority,
pool, label, kind, order), the waiting-seen hash (call id → when its driver last kept it), the kinds hash
(kind id → what its calls ask for, as JSON: cpus, gpus, ram_mb, groups, pool, limit) and one sorted set
per kind, of its calls' order keys (``turns.order_key``; every score 0, so members sort bytewise).
"""

from __future__ import annotations

from fluksio.constants import HELD_BACK_KEY, WAIT_KINDS_KEY, WAITING_KEY, WAITING_SEEN_KEY
from fluksio.placement import redis_scripts as scripts

#: KEYS of CLAIM: the machines' keys of every script (``redis_scripts.KEYS``), then the waiting hash,
#: the waiting-seen hash, the kinds hash and the held-back flag.
KEYS = [*scripts.KEYS, WAITING_KEY, WAITING_SEEN_KEY, WAIT_KINDS_KEY, HELD_BACK_KEY]
#: KEYS of FORGET and PRUNE_WAITING.
LIST_KEYS = [WAITING_KEY, WAITING_SEEN_KEY, WAIT_KINDS_KEY, HELD_BACK_KEY]

# drop: take one call off the list, given its kind, order key and id. unlist: the same from its body.
# Each script names the list's keys (waiting_key, seen_key, kinds_key, kind_prefix) before these.
LIST_HELPERS = """
local function drop(kind, order, call)
  if kind and kind ~= '' then
    redis.call('ZREM', kind_prefix .. kind, order)
    if redis.call('ZCARD', kind_prefix .. kind) == 0 then redis.call('HDEL', kinds_key, kind) end
  end
  redis.call('HDEL', waiting_key, call)
  redis.call('HDEL', seen_key, call)
end
local function unlist(call, body)
  drop(type(body.kind) == 'string' and body.kind or '', body.order, call)
end
"""

# ARGV: [1..5] as every script (redis_scripts.PREFIXES), [6] the kinds' sorted sets prefix, [7] the
# generation the placer planned at, [8] the call (grant) id, [9] clamped-from JSON ('' if not clamped),
# [10] its kind's id, [11] its kind as JSON (groups: a list of machine-name lists, 0 for any machine),
# [12] its order key if it is not listed yet, [13] now (seconds since the epoch), [14] the oldest mark
# of a call still waiting ('' for no limit), [15] its listing (run_id, node, priority, pool) as JSON,
# [16] why it waits when no machine has the resources free, [17] who waits ('' for the call alone).
# Returns {'stale'} (taking nothing) when the generation moved or the machine picked was dead (detached
# here); {'granted', machine, cpus, ram_mb, 'gpu,ids', group (0-based), incarnation}; or
# {'waiting', why, reason}, the call then listed (keeping its place if it was).
CLAIM = scripts.HELPERS + scripts.HEADS + """
local waiting_key, seen_key, kinds_key, kind_prefix = KEYS[5], KEYS[6], KEYS[7], ARGV[6]
""" + LIST_HELPERS + """
if (redis.call('GET', KEYS[2]) or '0') ~= ARGV[7] then return {'stale'} end
local grant_id, now, oldest = ARGV[8], tonumber(ARGV[13]), tonumber(ARGV[14])

local function decode_kind(json)
  local k = cjson.decode(json)
  k.sets = {}
  for i, group in ipairs(k.groups) do
    if type(group) == 'table' then
      local set = {}
      for _, name in ipairs(group) do set[name] = true end
      k.sets[i] = set
    else
      k.sets[i] = false
    end
  end
  return k
end
local asked = decode_kind(ARGV[11])

-- A retried claim (its reply lost on the way back) gets the grant it already has, charged once.
local at = redis.call('HGET', KEYS[4], grant_id)
if at then
  local held = redis.call('HGET', ARGV[2] .. at, grant_id)
  if held then
    local g, group = cjson.decode(held), 1
    for i, set in ipairs(asked.sets) do
      if not set or set[at] then group = i; break end
    end
    return {'granted', at, g.cpus, g.ram_mb, g.gpus, group - 1, redis.call('HGET', ARGV[1] .. at, 'incarnation')}
  end
end

-- Machines as read once by this script; pc, pg, pr: cpus, gpus and RAM the calls played through took.
local machines = {}
local function machine(name)
  local m = machines[name]
  if m ~= nil then return m end
  local b = redis.call('HMGET', ARGV[1] .. name, 'free_cpus', 'free_ram_mb', 'free_gpus', 'cpus', 'labelled',
                       'incarnation')
  m = false
  if b[1] then
    local ids = {}
    for id in string.gmatch(b[3] or '', '[^,]+') do table.insert(ids, id) end
    m = {cpus = tonumber(b[1]), ram = tonumber(b[2]), ids = ids, total = b[4], labelled = b[5],
         incarnation = b[6], alive = redis.call('EXISTS', ARGV[3] .. name) == 1, pc = 0, pg = 0, pr = 0}
  end
  machines[name] = m
  return m
end

-- The preferred machine the kind fits on (on paper: less what the calls played through took) and its
-- group (1-based), in backend.preference's order as TAKE_BEST walks it. strict (the claiming call's own
-- pick): a machine found dead is detached and 'stale' returned, for the placer to plan again.
local function pick(k, paper, strict)
  local below = k.cpus > 0 and '(' or ''
  for index, set in ipairs(k.sets) do
    for _, ranks in ipairs({{'0', below .. '1'}, {'2', below .. '3'}}) do
      local offset = 0
      repeat
        local names = redis.call('ZRANGEBYSCORE', KEYS[3], ranks[1], ranks[2], 'LIMIT', offset, 100)
        for _, name in ipairs(names) do
          if not set or set[name] then
            local m = machine(name)
            if not m then
              if strict then detach(name); return 'stale' end
            else
              local c, g, r = m.cpus, #m.ids, m.ram
              if paper then c, g, r = c - m.pc, g - m.pg, r - m.pr end
              if c >= k.cpus and g >= k.gpus and r >= k.ram_mb then
                if m.alive then return name, index end
                if strict then detach(name); return 'stale' end
              end
            end
          end
        end
        offset = offset + 100
      until #names < 100
    end
  end
  return nil
end

local pool_used, pool_paper = {}, {}
local function used(pool)
  if pool_used[pool] == nil then pool_used[pool] = redis.call('HLEN', ARGV[4] .. pool) end
  return pool_used[pool]
end
local function pool_free(k, paper)
  if k.pool == '' then return true end
  return used(k.pool) + (paper and (pool_paper[k.pool] or 0) or 0) < k.limit
end

-- Bytewise, as the sorted sets sort (Lua's own < follows the server's locale).
local function before(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

local listed = redis.call('HGET', waiting_key, grant_id)
listed = listed and cjson.decode(listed)
local mine = (listed and type(listed.order) == 'string' and listed.order ~= '') and listed.order or ARGV[12]

-- Play the calls ahead through, in order: each takes on paper what it would take now. A kind stops at its
-- first call that cannot go (those after it could not either).
local function next_of(kind, after)
  return redis.call('ZRANGEBYLEX', kind_prefix .. kind, after and ('(' .. after) or '-', '(' .. mine,
                    'LIMIT', 0, 1)[1]
end
local kinds, heads, decoded = {}, {}, {}
local all = redis.call('HGETALL', kinds_key)
for i = 1, #all, 2 do
  kinds[all[i]] = all[i + 1]
  local first = next_of(all[i])
  if first then table.insert(heads, {kind = all[i], order = first}) end
end
local first_played = nil
while #heads > 0 do
  local best = 1
  for i = 2, #heads do
    if before(heads[i].order, heads[best].order) then best = i end
  end
  local h = heads[best]
  local call = string.sub(h.order, 21)
  local goes = true
  local seen = tonumber(redis.call('HGET', seen_key, call))
  if (oldest and (not seen or seen < oldest)) or redis.call('HEXISTS', waiting_key, call) == 0 then
    drop(h.kind, h.order, call)  -- its driver died: nobody will claim it
  else
    local k = decoded[h.kind]
    if not k then k = decode_kind(kinds[h.kind]); decoded[h.kind] = k end
    local name = pool_free(k, true) and pick(k, true, false)
    if name then
      local m = machines[name]
      m.pc, m.pg, m.pr = m.pc + k.cpus, m.pg + k.gpus, m.pr + k.ram_mb
      if k.pool ~= '' then pool_paper[k.pool] = (pool_paper[k.pool] or 0) + 1 end
      first_played = first_played or call
    else
      goes = false
    end
  end
  local after = goes and next_of(h.kind, h.order)
  if after then h.order = after else table.remove(heads, best) end
end

local name, group = nil, nil
if pool_free(asked, true) then name, group = pick(asked, true, true) end
if name == 'stale' then return {'stale'} end
if name then
  local m = machines[name]
  local gpus = table.concat(m.ids, ',', 1, asked.gpus)
  redis.call('HSET', ARGV[1] .. name, 'free_cpus', m.cpus - asked.cpus, 'free_ram_mb', m.ram - asked.ram_mb,
             'free_gpus', table.concat(m.ids, ',', asked.gpus + 1))
  redis.call('HSET', ARGV[2] .. name, grant_id, cjson.encode({cpus = asked.cpus, ram_mb = asked.ram_mb, gpus = gpus,
             clamped_from = ARGV[9], pool = asked.pool}))
  redis.call('HSET', KEYS[4], grant_id, name)
  if asked.pool ~= '' then redis.call('HSET', ARGV[4] .. asked.pool, grant_id, name) end
  rank(name, m.labelled, m.total, m.cpus - asked.cpus)
  if listed then
    unlist(grant_id, listed)
    -- Someone was refused for a call ahead of it: this may be that call, and what is left theirs.
    if redis.call('DEL', KEYS[8]) == 1 then
      redis.call('PUBLISH', ARGV[5], 'turn' .. named_firsts(kinds_key, kind_prefix, ARGV[10]))
    end
  end
  -- What freed may hold the next call of its kind too: name it when what is free fits it. (Not on paper:
  -- were calls ahead to take that room, it would be refused behind them, and hear their turn.)
  local next_call = kinds[ARGV[10]] and
      redis.call('ZRANGEBYLEX', kind_prefix .. ARGV[10], '(' .. mine, '+', 'LIMIT', 0, 1)[1]
  if next_call then
    local rest = {}
    for i = asked.gpus + 1, #m.ids do table.insert(rest, m.ids[i]) end
    m.cpus, m.ram, m.ids = m.cpus - asked.cpus, m.ram - asked.ram_mb, rest
    if asked.pool ~= '' then pool_used[asked.pool] = used(asked.pool) + 1 end
    if pool_free(asked, false) and pick(asked, false, false) then
      redis.call('PUBLISH', ARGV[5], 'room:' .. string.sub(next_call, 21))
    end
  end
  return {'granted', name, asked.cpus, asked.ram_mb, gpus, group - 1, m.incarnation}
end

local function text(value)
  if value == nil or value == cjson.null then return '?' end
  return tostring(value)
end
local why, reason = 'machines', ARGV[16]
if asked.pool ~= '' and used(asked.pool) >= asked.limit then
  why = 'pool'
  reason = string.format("waiting for pool '%s' (%d/%d in use)", asked.pool, used(asked.pool), asked.limit)
elseif first_played and pick(asked, false, false) then
  why = 'behind'
  local ahead = cjson.decode(redis.call('HGET', waiting_key, first_played))
  reason = string.format('waiting for its turn: calls ahead of it can use what is free (the first: %s of run %s, ' ..
                         'priority %d)', text(ahead.node), text(ahead.run_id), tonumber(ahead.priority) or 0)
  redis.call('SET', KEYS[8], '1')
end

local body = listed or cjson.decode(ARGV[15])
if not listed then body.since = now end
body.reason = ARGV[17] ~= '' and (ARGV[17] .. ' ' .. reason) or reason
if body.kind ~= ARGV[10] or body.order ~= mine then
  if listed and type(body.kind) == 'string' then  -- listed under another kind (its plan changed): move it
    redis.call('ZREM', kind_prefix .. body.kind, text(body.order))
    if redis.call('ZCARD', kind_prefix .. body.kind) == 0 then redis.call('HDEL', kinds_key, body.kind) end
  end
  redis.call('ZADD', kind_prefix .. ARGV[10], 0, mine)
  body.kind, body.order = ARGV[10], mine
end
redis.call('HSETNX', kinds_key, ARGV[10], ARGV[11])
redis.call('HSET', waiting_key, grant_id, cjson.encode(body))
redis.call('HSET', seen_key, grant_id, ARGV[13])
return {'waiting', why, reason}
"""

# KEYS: LIST_KEYS. ARGV[1]: call id, [2]: the kinds' sorted sets prefix, [3]: the changes channel. Takes
# the call off the list; if someone was refused for a call ahead of it, everyone hears. Returns 1 when
# it was listed.
FORGET = scripts.HEADS + """
local waiting_key, seen_key, kinds_key, kind_prefix = KEYS[1], KEYS[2], KEYS[3], ARGV[2]
""" + LIST_HELPERS + """
local raw = redis.call('HGET', waiting_key, ARGV[1])
if not raw then
  redis.call('HDEL', seen_key, ARGV[1])
  return 0
end
unlist(ARGV[1], cjson.decode(raw))
if redis.call('DEL', KEYS[4]) == 1 then
  redis.call('PUBLISH', ARGV[3], 'turn' .. named_firsts(kinds_key, kind_prefix, nil))
end
return 1
"""

# KEYS: LIST_KEYS. ARGV[1]: the oldest mark still fresh (seconds since the epoch), [2]: the kinds' sorted
# sets prefix, [3..]: call ids. Takes each call off the list when it is still not kept since then, or no
# longer listed.
PRUNE_WAITING = """
local waiting_key, seen_key, kinds_key, kind_prefix = KEYS[1], KEYS[2], KEYS[3], ARGV[2]
""" + LIST_HELPERS + """
local oldest = tonumber(ARGV[1])
for i = 3, #ARGV do
  local raw = redis.call('HGET', waiting_key, ARGV[i])
  local body = raw and cjson.decode(raw)
  local at = tonumber(redis.call('HGET', seen_key, ARGV[i])) or (body and tonumber(body.since))
  if not body then
    redis.call('HDEL', seen_key, ARGV[i])
  elseif at and at < oldest then
    unlist(ARGV[i], body)
  end
end
return 0
"""
