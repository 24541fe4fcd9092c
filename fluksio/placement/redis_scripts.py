"""The Lua scripts of the Redis books: each take, give-back, start and look is one of them, atomic.

Kept apart from ``redis.py`` so that the books read as Python; each script says
which KEYS and ARGV it takes and what it returns.
"""

from __future__ import annotations

from fluksio.constants import (
    CHANGES_CHANNEL,
    GRANT_MACHINE_KEY,
    GRANTS_KEY,
    HEARTBEAT_KEY,
    MACHINE_KEY,
    MACHINES_BY_LOAD_KEY,
    MACHINES_GENERATION_KEY,
    MACHINES_KEY,
    POOL_KEY,
)

# Every script below (but START and VOID) takes the same keys and first arguments.
# KEYS: [1] machines set, [2] generation counter, [3] machines by preference (zset), [4] grant id → machine.
# ARGV: [1..4] machine hash, grants hash, heartbeat key and pool holders prefixes, [5] the changes channel.
# Machine (and pool) names are only known inside a script, so their keys are built there: fine on one
# Redis server, not on a Redis Cluster.
# The scripts write after reading non-deterministic replies (SMEMBERS): Redis 5 or later replicates their
# effects, not the scripts, which makes that safe.
KEYS = [MACHINES_KEY, MACHINES_GENERATION_KEY, MACHINES_BY_LOAD_KEY, GRANT_MACHINE_KEY]
PREFIXES = [MACHINE_KEY, GRANTS_KEY, HEARTBEAT_KEY, POOL_KEY, CHANGES_CHANNEL]

# free_pools: the pool slots of grants (HGETALL's id, body, … of a grants hash) that are void are free,
# and calls waiting for them hear so. detach: remove a machine's books (its grants from the grant index,
# their pool slots freed); the generation moves only when it was attached, so that two placers finding
# the same dead machine do not make everyone re-read.
# rank: a machine's place in backend.preference as one number — labelled machines after all others
# (+ 2), then by load (cpus in use / cpus, 0..1); the sorted set orders equal ranks by name (bytewise,
# as Python orders str). Machines without the cpus/labelled fields are left unranked, never picked.
FREE_POOLS = """
local function free_pools(grants, pool_prefix, channel)
  local freed = false
  for i = 1, #grants, 2 do
    local g = cjson.decode(grants[i + 1])
    if type(g.pool) == 'string' and g.pool ~= '' then
      redis.call('HDEL', pool_prefix .. g.pool, grants[i])
      freed = true
    end
  end
  if freed then redis.call('PUBLISH', channel, 'pool') end
end
"""

HELPERS = FREE_POOLS + """
local function detach(name)
  local grants = redis.call('HGETALL', ARGV[2] .. name)
  for i = 1, #grants, 2 do redis.call('HDEL', KEYS[4], grants[i]) end
  free_pools(grants, ARGV[4], ARGV[5])
  redis.call('DEL', ARGV[1] .. name, ARGV[2] .. name, ARGV[3] .. name)
  redis.call('ZREM', KEYS[3], name)
  if redis.call('SREM', KEYS[1], name) == 1 then redis.call('INCR', KEYS[2]) end
end
local function rank(name, labelled, cpus, free_cpus)
  cpus = tonumber(cpus)
  if not cpus or not labelled then return end
  local load = (cpus - tonumber(free_cpus)) / cpus
  redis.call('ZADD', KEYS[3], string.format('%.17g', (labelled == '1' and 2 or 0) + load), name)
end
"""

# named_firsts: ':' and the ids of the first waiting call of each kind but ``skip`` (in the installation's order),
# comma-separated, for a change's message: only the process holding a named call wakes it
# (placement/wakeups.py), where each process waking its own first made all but one claim in vain. Just ':'
# when nobody waits. An order key is 20 characters of priority and time, then the call id (turns.order_key).
HEADS = """
local function named_firsts(kinds_key, kind_prefix, skip)
  local named = {}
  for _, kind in ipairs(redis.call('HKEYS', kinds_key)) do
    if kind ~= skip then
      local first = redis.call('ZRANGEBYLEX', kind_prefix .. kind, '-', '+', 'LIMIT', 0, 1)[1]
      if first then table.insert(named, string.sub(first, 21)) end
    end
  end
  return ':' .. table.concat(named, ',')
end
"""

# ARGV[6]: machine name. Returns the grants it held (id, body, id, body …) and removes its books.
LEAVE = HELPERS + """
local held = redis.call('HGETALL', ARGV[2] .. ARGV[6])
detach(ARGV[6])
return held
"""

# ARGV[6]: the generation the caller has cached ('' for none). Detaches every machine whose heartbeat
# expired, and ranks any machine the sorted set lacks (attached by an older fluksio). Returns
# {generation} when that is still the cached one, else {generation, name, inventory JSON, …} for every
# live machine.
LOOK = HELPERS + """
for _, name in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if redis.call('EXISTS', ARGV[3] .. name) == 0 or redis.call('EXISTS', ARGV[1] .. name) == 0 then
    detach(name)
  elseif not redis.call('ZSCORE', KEYS[3], name) then
    local inventory = cjson.decode(redis.call('HGET', ARGV[1] .. name, 'inventory'))
    local labelled = #inventory.labels > 0 and '1' or '0'
    redis.call('HSET', ARGV[1] .. name, 'cpus', inventory.cpus, 'labelled', labelled)
    rank(name, labelled, inventory.cpus, redis.call('HGET', ARGV[1] .. name, 'free_cpus'))
  end
end
local generation = redis.call('GET', KEYS[2]) or '0'
if generation == ARGV[6] then return {generation} end
local reply = {generation}
for _, name in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  table.insert(reply, name)
  table.insert(reply, redis.call('HGET', ARGV[1] .. name, 'inventory'))
end
return reply
"""

# ARGV[6]: the generation the placer planned at; [7..11]: cpus, gpus, ram_mb, grant id, clamped-from
# JSON ('' if not clamped); [12]: the machines it may go to, a JSON array ('' for any machine).
# Walks machines in preference order — only the ranks that leave a cpu free, when cpus are asked for —
# and takes on the first allowed one with the resources free. Returns {'stale'}, taking nothing, when
# the generation moved or the machine picked was dead (it is detached here); {'none'} when no allowed
# machine has the resources free; else {'granted', machine, cpus, ram_mb, 'gpu,ids', incarnation}.
TAKE_BEST = HELPERS + """
if (redis.call('GET', KEYS[2]) or '0') ~= ARGV[6] then return {'stale'} end
local want_cpus, want_gpus, want_ram, grant_id = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]), ARGV[10]
-- A retried claim (its reply lost on the way back) gets the grant it already has, charged once.
local at = redis.call('HGET', KEYS[4], grant_id)
if at then
  local held = redis.call('HGET', ARGV[2] .. at, grant_id)
  if held then
    local g = cjson.decode(held)
    return {'granted', at, g.cpus, g.ram_mb, g.gpus, redis.call('HGET', ARGV[1] .. at, 'incarnation')}
  end
end
local allowed = nil
if ARGV[12] ~= '' then
  allowed = {}
  for _, name in ipairs(cjson.decode(ARGV[12])) do allowed[name] = true end
end
local below = want_cpus > 0 and '(' or ''  -- a rank of 1 (or 3) is a machine with every cpu in use
local PAGE = 100
for _, ranks in ipairs({{'0', below .. '1'}, {'2', below .. '3'}}) do
  local offset = 0
  repeat
    local names = redis.call('ZRANGEBYSCORE', KEYS[3], ranks[1], ranks[2], 'LIMIT', offset, PAGE)
    for _, name in ipairs(names) do
      if not allowed or allowed[name] then
        local books = redis.call('HMGET', ARGV[1] .. name, 'free_cpus', 'free_ram_mb', 'free_gpus', 'cpus',
                                 'labelled', 'incarnation')
        if not books[1] then detach(name); return {'stale'} end
        local free_cpus, free_ram = tonumber(books[1]), tonumber(books[2])
        local ids = {}
        for id in string.gmatch(books[3], '[^,]+') do table.insert(ids, id) end
        if free_cpus >= want_cpus and free_ram >= want_ram and #ids >= want_gpus then
          if redis.call('EXISTS', ARGV[3] .. name) == 0 then detach(name); return {'stale'} end
          local gpus = table.concat(ids, ',', 1, want_gpus)
          redis.call('HSET', ARGV[1] .. name, 'free_cpus', free_cpus - want_cpus, 'free_ram_mb', free_ram - want_ram,
                     'free_gpus', table.concat(ids, ',', want_gpus + 1))
          redis.call('HSET', ARGV[2] .. name, grant_id,
                     cjson.encode({cpus = want_cpus, ram_mb = want_ram, gpus = gpus, clamped_from = ARGV[11]}))
          redis.call('HSET', KEYS[4], grant_id, name)
          rank(name, books[5], books[4], free_cpus - want_cpus)
          return {'granted', name, want_cpus, want_ram, gpus, books[6]}
        end
      end
    end
    offset = offset + PAGE
  until #names < PAGE
end
return {'none'}
"""

# KEYS[5]: the waiting calls' kinds hash. ARGV[6]: machine name, [7]: grant id, [8]: the kinds' sorted sets
# prefix, [9]: a list to push onto afterwards, given back or not ('' for none: backend.Tell), [10]: what
# to push, [11]: the list's TTL in seconds (0: left as it is). Returns 1 when resources came back (its
# pool slot with them).
GIVE = HELPERS + HEADS + """
local function give_back()
  redis.call('HDEL', KEYS[4], ARGV[7])
  local grants, machine = ARGV[2] .. ARGV[6], ARGV[1] .. ARGV[6]
  local held = redis.call('HGET', grants, ARGV[7])
  if not held then return 0 end
  redis.call('HDEL', grants, ARGV[7])
  local g = cjson.decode(held)
  local pooled = type(g.pool) == 'string' and g.pool ~= ''
  if pooled then redis.call('HDEL', ARGV[4] .. g.pool, ARGV[7]) end
  -- One read of the machine's books (nothing, when it is gone) and one write of what is free again: every
  -- give-back runs this, and each command a script runs costs the server as one sent would.
  local books = redis.call('HMGET', machine, 'free_cpus', 'free_ram_mb', 'free_gpus', 'labelled', 'cpus')
  if not books[1] then
    if pooled then redis.call('PUBLISH', ARGV[5], 'give') end  -- the slot is free, if nothing else is
    return 0
  end
  local free_cpus = tonumber(books[1]) + g.cpus
  local ids = {}
  for id in string.gmatch(books[3], '[^,]+') do table.insert(ids, tonumber(id)) end
  for id in string.gmatch(g.gpus, '[^,]+') do table.insert(ids, tonumber(id)) end
  table.sort(ids)
  redis.call('HSET', machine, 'free_cpus', free_cpus, 'free_ram_mb', tonumber(books[2]) + g.ram_mb,
             'free_gpus', table.concat(ids, ','))
  rank(ARGV[6], books[4], books[5], free_cpus)
  -- Heard by the processes holding the calls it names. With no call listed, nobody is: every call refused
  -- in its turn is listed; one refused while the machines kept changing is not, and waits for an attach or
  -- its driver's next try (placer.try_claim).
  local named = named_firsts(KEYS[5], ARGV[8], nil)
  if named ~= ':' then redis.call('PUBLISH', ARGV[5], 'give' .. named) end
  return 1
end
local gave = give_back()
if ARGV[9] and ARGV[9] ~= '' then
  redis.call('RPUSH', ARGV[9], ARGV[10])
  if tonumber(ARGV[11]) > 0 then redis.call('EXPIRE', ARGV[9], ARGV[11]) end
end
return gave
"""


# KEYS[1]: the machine's grants hash. ARGV[1]: grant id, [2]: the delivery's token, [3]: a channel to
# publish on when the call starts ('' for none: backend.Tell), [4]: what to publish. Returns 1 when the
# grant is held and its call is not started, or was started with this very token (the same command sent
# again after its answer was lost: not published again); 0 when it was given back (or voided by the
# machine attaching again) or started by another delivery.
START = """
local held = redis.call('HGET', KEYS[1], ARGV[1])
if not held then return 0 end
local g = cjson.decode(held)
if g.started then return g.started == ARGV[2] and 1 or 0 end
g.started = ARGV[2]
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(g))
if ARGV[3] and ARGV[3] ~= '' then redis.call('PUBLISH', ARGV[3], ARGV[4]) end
return 1
"""


# KEYS[1]: a machine's grants hash, which it attaching again voids. ARGV[1]: pool holders prefix, [2]: the
# changes channel. Frees the void grants' pool slots and deletes the hash.
VOID = FREE_POOLS + """
free_pools(redis.call('HGETALL', KEYS[1]), ARGV[1], ARGV[2])
redis.call('DEL', KEYS[1])
return 0
"""
