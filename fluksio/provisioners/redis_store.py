"""Machine requests in Redis, shared by every driver and by ``fluksio placer``.

Reserving a profile's slot and ending a request are each one Lua script, so two
drivers never both submit for one profile and two pollers never both end one request.
"""

from __future__ import annotations

import redis

from fluksio.constants import PROVISION_LAST_KEY as LAST_KEY
from fluksio.constants import PROVISION_LIVE_KEY as LIVE_KEY
from fluksio.constants import PROVISION_SLOT_KEY as SLOT_KEY
from fluksio.provisioners.request import MachineRequest
from fluksio.provisioners.store import RequestStore

# KEYS: slot, live. ARGV: id, request JSON. Returns the outstanding request's JSON, or nil when reserved.
_RESERVE = """
local held = redis.call('GET', KEYS[1])
if held then
  local body = redis.call('HGET', KEYS[2], held)
  if body then return body end
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return false
"""

# KEYS: slot, live, last. ARGV: id, request JSON, live (1/0), outstanding (1/0). Returns 1 when written.
_UPDATE = """
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0 then return 0 end
if ARGV[4] == '0' and redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
if ARGV[3] == '1' then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
else
  redis.call('HDEL', KEYS[2], ARGV[1])
  redis.call('SET', KEYS[3], ARGV[2])
end
return 1
"""


class RedisRequestStore(RequestStore):
    def __init__(self, client: redis.Redis) -> None:
        self.redis = client
        self._reserve = client.register_script(_RESERVE)
        self._update = client.register_script(_UPDATE)

    def reserve(self, request: MachineRequest) -> MachineRequest | None:
        held = self._reserve(keys=[SLOT_KEY + request.profile, LIVE_KEY],
                             args=[request.id, request.model_dump_json()])
        return None if held is None else MachineRequest.model_validate_json(held)

    def update(self, request: MachineRequest) -> bool:
        return bool(self._update(
            keys=[SLOT_KEY + request.profile, LIVE_KEY, LAST_KEY + request.profile],
            args=[request.id, request.model_dump_json(), int(request.state.is_live()),
                  int(request.state.is_outstanding())],
        ))

    def live(self) -> list[MachineRequest]:
        requests = [MachineRequest.model_validate_json(body) for body in self.redis.hvals(LIVE_KEY)]
        return sorted(requests, key=lambda r: r.submitted_at)

    def last(self, profile: str) -> MachineRequest | None:
        body = self.redis.get(LAST_KEY + profile)
        return None if body is None else MachineRequest.model_validate_json(body)
