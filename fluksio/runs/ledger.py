"""The call ledger: which dispatched calls may still run.

Redis redelivers an unacknowledged message when a worker comes back; by then
its driver may have settled the call (retried it elsewhere, or cancelled it).
A worker runs a call only if it can move it from ``dispatched`` to
``running`` here, so a settled call is dropped, never run twice.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from typing import Any

from fluksio.constants import CALL_KEY

#: A ledger entry outlives any sane call, in seconds; then it expires on its own.
ENTRY_TTL_S = 7 * 24 * 3600


class CallLedger(ABC):
    @abstractmethod
    def dispatched(self, call_id: str) -> None:
        """The driver is about to send the call."""

    @abstractmethod
    def start(self, call_id: str) -> bool:
        """A worker wants to run the call: ``True`` exactly once, and only while it is unsettled."""

    @abstractmethod
    def settle(self, call_id: str) -> None:
        """The driver is done with the call; any later delivery of it is dropped."""


class MemoryLedger(CallLedger):
    def __init__(self) -> None:
        self._state: dict[str, str] = {}
        self._lock = threading.Lock()

    def dispatched(self, call_id: str) -> None:
        with self._lock:
            self._state[call_id] = "dispatched"

    def start(self, call_id: str) -> bool:
        with self._lock:
            if self._state.get(call_id) != "dispatched":
                return False
            self._state[call_id] = "running"
            return True

    def settle(self, call_id: str) -> None:
        with self._lock:
            self._state.pop(call_id, None)


_START = """
if redis.call('GET', KEYS[1]) == 'dispatched' then
  redis.call('SET', KEYS[1], 'running', 'KEEPTTL')
  return 1
end
return 0
"""


class RedisLedger(CallLedger):
    def __init__(self, client: Any) -> None:
        self.redis = client
        self._start = client.register_script(_START)

    def dispatched(self, call_id: str) -> None:
        self.redis.set(CALL_KEY + call_id, "dispatched", ex=ENTRY_TTL_S)

    def start(self, call_id: str) -> bool:
        return bool(self._start(keys=[CALL_KEY + call_id]))

    def settle(self, call_id: str) -> None:
        self.redis.delete(CALL_KEY + call_id)
