"""Books in Redis, shared by every driver on every host.

Each take and give-back is one Lua script, so two drivers can never both take
the last free cpu. A machine is live while its heartbeat key exists; the first
placer to see it expired removes it. Every give-back and attach is published
on a channel, and each process's listener thread wakes its waiting drivers.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis

from fluksio.constants import (
    CHANGES_CHANNEL,
    GRANTS_KEY,
    HEARTBEAT_KEY,
    MACHINE_KEY,
    MACHINES_KEY,
    WAITING_KEY,
)
from fluksio.placement.backend import Books, MachineView, WaitingCall
from fluksio.schemas import Grant, Inventory, Resources

log = logging.getLogger(__name__)

# KEYS: machine hash, grants hash, heartbeat. ARGV: cpus, gpus, ram_mb, grant id, clamped-from JSON.
# Returns {cpus, ram_mb, "gpu,ids", incarnation} or nil when the machine is gone or lacks the resources.
_TAKE = """
if redis.call('EXISTS', KEYS[3]) == 0 or redis.call('EXISTS', KEYS[1]) == 0 then return nil end
local held = redis.call('HGET', KEYS[2], ARGV[4])
local incarnation = redis.call('HGET', KEYS[1], 'incarnation')
if held then local g = cjson.decode(held); return {g.cpus, g.ram_mb, g.gpus, incarnation} end
local cpus = tonumber(redis.call('HGET', KEYS[1], 'free_cpus'))
local ram = tonumber(redis.call('HGET', KEYS[1], 'free_ram_mb'))
local free = redis.call('HGET', KEYS[1], 'free_gpus')
local want_cpus, want_gpus, want_ram = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local ids = {}
for id in string.gmatch(free, '[^,]+') do table.insert(ids, id) end
if cpus < want_cpus or ram < want_ram or #ids < want_gpus then return nil end
local taken, rest = {}, {}
for i, id in ipairs(ids) do if i <= want_gpus then table.insert(taken, id) else table.insert(rest, id) end end
local gpus = table.concat(taken, ',')
redis.call('HSET', KEYS[1], 'free_cpus', cpus - want_cpus, 'free_ram_mb', ram - want_ram,
           'free_gpus', table.concat(rest, ','))
redis.call('HSET', KEYS[2], ARGV[4],
           cjson.encode({cpus = want_cpus, ram_mb = want_ram, gpus = gpus, clamped_from = ARGV[5]}))
return {want_cpus, want_ram, gpus, incarnation}
"""

# KEYS: machine hash, grants hash. ARGV: grant id, changes channel. Returns 1 when resources came back.
_GIVE = """
local held = redis.call('HGET', KEYS[2], ARGV[1])
if not held then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local g = cjson.decode(held)
redis.call('HINCRBY', KEYS[1], 'free_cpus', g.cpus)
redis.call('HINCRBY', KEYS[1], 'free_ram_mb', g.ram_mb)
local ids = {}
for id in string.gmatch(redis.call('HGET', KEYS[1], 'free_gpus'), '[^,]+') do table.insert(ids, tonumber(id)) end
for id in string.gmatch(g.gpus, '[^,]+') do table.insert(ids, tonumber(id)) end
table.sort(ids)
redis.call('HSET', KEYS[1], 'free_gpus', table.concat(ids, ','))
redis.call('PUBLISH', ARGV[2], 'give')
return 1
"""


def _ids(text: str | bytes | None) -> tuple[int, ...]:
    if isinstance(text, bytes):
        text = text.decode()
    return tuple(int(part) for part in (text or "").split(",") if part)


class RedisBooks(Books):
    def __init__(self, client: redis.Redis, heartbeat_ttl_s: float) -> None:
        self.redis = client
        #: A machine whose heartbeat is older than this is gone, in seconds.
        self.heartbeat_ttl_s = heartbeat_ttl_s
        self._take = client.register_script(_TAKE)
        self._give = client.register_script(_GIVE)
        self._callbacks: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._listener: threading.Thread | None = None
        self._stopping = threading.Event()

    # -- machines -------------------------------------------------------------------------------

    def attach(self, inventory: Inventory) -> None:
        name = inventory.name
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(GRANTS_KEY + name)
        pipe.hset(MACHINE_KEY + name, mapping={
            "inventory": inventory.model_dump_json(),
            "free_cpus": inventory.cpus,
            "free_ram_mb": inventory.ram_mb,
            "free_gpus": ",".join(map(str, sorted(inventory.gpus))),
            "incarnation": uuid.uuid4().hex,
        })
        pipe.sadd(MACHINES_KEY, name)
        pipe.set(HEARTBEAT_KEY + name, time.time(), px=int(self.heartbeat_ttl_s * 1000))
        pipe.publish(CHANGES_CHANNEL, "attach")
        pipe.execute()

    def heartbeat(self, inventory: Inventory) -> None:
        """Refresh the machine's heartbeat; re-attach it (books afresh) if it had been declared gone."""
        if not self.redis.exists(MACHINE_KEY + inventory.name):
            log.warning("machine %s had been declared gone; attaching it again", inventory.name)
            self.attach(inventory)
            return
        self.redis.set(HEARTBEAT_KEY + inventory.name, time.time(), px=int(self.heartbeat_ttl_s * 1000))

    def detach(self, name: str) -> list[Grant]:
        held = self.redis.hgetall(GRANTS_KEY + name)
        pipe = self.redis.pipeline(transaction=True)
        pipe.srem(MACHINES_KEY, name)
        pipe.delete(MACHINE_KEY + name, GRANTS_KEY + name, HEARTBEAT_KEY + name)
        pipe.execute()
        return [self._grant(name, gid, json.loads(value)) for gid, value in held.items()]

    def machines(self) -> list[MachineView]:
        names = sorted(n.decode() for n in self.redis.smembers(MACHINES_KEY))
        if not names:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for name in names:
            pipe.hgetall(MACHINE_KEY + name)
            pipe.get(HEARTBEAT_KEY + name)
            pipe.hlen(GRANTS_KEY + name)
        replies = pipe.execute()
        views = []
        now = time.time()
        for i, name in enumerate(names):
            books, beat, calls = replies[3 * i: 3 * i + 3]
            if not books or beat is None:
                self.detach(name)  # its heartbeat expired: the worker is gone
                continue
            inventory = Inventory.model_validate_json(books[b"inventory"])
            free_gpus = _ids(books.get(b"free_gpus"))
            views.append(MachineView(
                inventory=inventory,
                free=Resources(cpus=int(books[b"free_cpus"]), gpus=len(free_gpus), ram_mb=int(books[b"free_ram_mb"])),
                free_gpus=free_gpus, calls=int(calls), heartbeat_age_s=max(0.0, now - float(beat)),
            ))
        return views

    def alive(self, name: str) -> bool:
        return bool(self.redis.exists(HEARTBEAT_KEY + name))

    # -- grants ---------------------------------------------------------------------------------

    def take(self, machine: str, resources: Resources, grant_id: str,
             clamped_from: Resources | None = None) -> Grant | None:
        reply = self._take(
            keys=[MACHINE_KEY + machine, GRANTS_KEY + machine, HEARTBEAT_KEY + machine],
            args=[resources.cpus, resources.gpus, resources.ram_mb, grant_id,
                  clamped_from.model_dump_json() if clamped_from else ""],
        )
        if reply is None:
            return None
        cpus, ram_mb, gpus, incarnation = reply
        return Grant(id=grant_id, machine=machine, cpus=int(cpus), ram_mb=int(ram_mb), gpus=_ids(gpus),
                     clamped_from=clamped_from, incarnation=incarnation.decode())

    def give(self, grant: Grant) -> bool:
        return bool(self._give(keys=[MACHINE_KEY + grant.machine, GRANTS_KEY + grant.machine],
                               args=[grant.id, CHANGES_CHANNEL]))

    def lost(self, grant: Grant) -> bool:
        pipe = self.redis.pipeline(transaction=False)
        pipe.hget(MACHINE_KEY + grant.machine, "incarnation")
        pipe.exists(HEARTBEAT_KEY + grant.machine)
        incarnation, alive = pipe.execute()
        if not alive:
            if incarnation is not None:
                self.detach(grant.machine)
            return True
        return incarnation is None or incarnation.decode() != grant.incarnation

    @staticmethod
    def _grant(machine: str, grant_id: bytes | str, body: dict[str, Any]) -> Grant:
        gid = grant_id.decode() if isinstance(grant_id, bytes) else grant_id
        clamped = Resources.model_validate_json(body["clamped_from"]) if body.get("clamped_from") else None
        return Grant(id=gid, machine=machine, cpus=body["cpus"], ram_mb=body["ram_mb"], gpus=_ids(body["gpus"]),
                     clamped_from=clamped)

    # -- waiting --------------------------------------------------------------------------------

    def note_waiting(self, waiting: WaitingCall) -> None:
        known = self.redis.hget(WAITING_KEY, waiting.call_id)
        if known is not None:
            waiting.since = json.loads(known)["since"]
        self.redis.hset(WAITING_KEY, waiting.call_id, json.dumps({
            "run_id": waiting.run_id, "node": waiting.node, "reason": waiting.reason, "since": waiting.since,
        }))

    def forget_waiting(self, call_id: str) -> None:
        self.redis.hdel(WAITING_KEY, call_id)

    def waiting(self) -> list[WaitingCall]:
        calls = []
        for call_id, body in self.redis.hgetall(WAITING_KEY).items():
            data = json.loads(body)
            calls.append(WaitingCall(call_id.decode(), data["run_id"], data["node"], data["reason"], data["since"]))
        return calls

    # -- change notifications ---------------------------------------------------------------------

    def on_change(self, callback: Callable[[], None]) -> None:
        with self._lock:
            self._callbacks.append(callback)
            if self._listener is None:
                self._listener = threading.Thread(target=self._listen, name="fluksio-placer-changes", daemon=True)
                self._listener.start()

    def _listen(self) -> None:
        while not self._stopping.is_set():
            pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
            try:
                pubsub.subscribe(CHANGES_CHANNEL)
                # A change may have happened while we were (re)subscribing: wake everyone once.
                self._fire()
                while not self._stopping.is_set():
                    if pubsub.get_message(timeout=1.0) is not None:
                        self._fire()
            except redis.RedisError:
                log.warning("lost the placer change channel; resubscribing", exc_info=True)
                self._stopping.wait(0.5)
            finally:
                pubsub.close()

    def _fire(self) -> None:
        with self._lock:
            callbacks = list(self._callbacks)
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("a placer change listener failed")

    def close(self) -> None:
        self._stopping.set()
        if self._listener is not None:
            self._listener.join(2)
