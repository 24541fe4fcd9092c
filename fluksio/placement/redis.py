"""Books in Redis, shared by every driver on every host.

A claim is one Lua script (``redis_claim.CLAIM``) and one round trip, whatever the
number of machines and of waiting calls: the script plays the calls ahead of it
through (``turns``: the installation's one order of who waits, kept here for
every driver on every host), then walks the machines in the placer's preference
order — kept ready in a sorted set, re-ranked by every take and give-back —
takes on the first the placer allowed that has the resources free (less what
the calls ahead would take), and stops; or lists the call as waiting, in its
place. So two drivers can never both take the last free cpu, nor a later call
the place of an earlier one that could use it.

The placer plans from the machines' inventories, which change only when a
machine attaches or leaves; they are cached here. Every attach and detach moves
a generation counter, the take script refuses (taking nothing) a plan made at
another generation, and the placer plans again on a fresh read. A machine is
live while its heartbeat key exists; the first script to find it expired
detaches it. A give-back is one script too. Every give-back and attach is
published on a channel, and each process's listener thread wakes its waiting
drivers.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from fluksio.constants import (
    CHANGES_CHANNEL,
    GRANTS_KEY,
    HEARTBEAT_KEY,
    MACHINE_KEY,
    MACHINES_BY_LOAD_KEY,
    MACHINES_GENERATION_KEY,
    MACHINES_KEY,
    POOL_KEY,
    WAIT_KIND_KEY,
    WAIT_KINDS_KEY,
    WAITING_KEY,
    WAITING_SEEN_KEY,
)
from fluksio.placement import redis_claim
from fluksio.placement import redis_scripts as scripts
from fluksio.placement.backend import ANY_CHANGE, TURN, Books, Change, MachinesChanged, MachineView, Tell, WaitingCall
from fluksio.placement.turns import Ask, Refusal, Why, order_key
from fluksio.schemas import Grant, Inventory, Resources

log = logging.getLogger(__name__)

def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _ids(text: str | bytes | None) -> tuple[int, ...]:
    if isinstance(text, bytes):
        text = text.decode()
    return tuple(int(part) for part in (text or "").split(",") if part)


@dataclass(frozen=True)
class _Cache:
    """The live machines' inventories as of one generation; replaced whole, never changed in place."""

    #: The generation counter's value when read, as Redis returns it ('0' before any attach).
    generation: str
    #: Sorted by name.
    inventories: tuple[Inventory, ...]
    #: Name → (inventory JSON, parsed), so that a re-read parses only machines that changed.
    parsed: dict[str, tuple[bytes, Inventory]]
    #: ``time.monotonic()`` of the read, in seconds.
    read_at: float


class RedisBooks(Books):
    """Books in one Redis database. Thread-safe: drivers in one process share one instance."""

    def __init__(self, client: redis.Redis, heartbeat_ttl_s: float, clock: Callable[[], float] = time.time) -> None:
        self.redis = client
        #: Seconds since the epoch, for when a waiting call was last kept (tests pass one they can move).
        self._clock = clock
        #: A machine whose heartbeat is older than this is gone, in seconds.
        self.heartbeat_ttl_s = heartbeat_ttl_s
        self._leave = client.register_script(scripts.LEAVE)
        self._look = client.register_script(scripts.LOOK)
        self._take_best = client.register_script(scripts.TAKE_BEST)
        self._give = client.register_script(scripts.GIVE)
        self._start = client.register_script(scripts.START)
        self._void = client.register_script(scripts.VOID)
        self._claim = client.register_script(redis_claim.CLAIM)
        self._forget = client.register_script(redis_claim.FORGET)
        self._prune_waiting = client.register_script(redis_claim.PRUNE_WAITING)
        #: The inventories claims are planned on; see ``inventories``. ``None`` until first read.
        self._cache: _Cache | None = None
        self._callbacks: list[Callable[[Change], None]] = []
        self._lock = threading.Lock()
        self._listener: threading.Thread | None = None
        self._stopping = threading.Event()

    # -- machines -------------------------------------------------------------------------------

    def attach(self, inventory: Inventory) -> None:
        name = inventory.name
        labelled = bool(inventory.labels)
        pipe = self.redis.pipeline(transaction=True)
        # Grants of an earlier start are void, and their pool slots free (their drivers find them lost and
        # give them back, which also clears them from the grant index).
        self._void(keys=[GRANTS_KEY + name], args=[POOL_KEY, CHANGES_CHANNEL], client=pipe)
        pipe.hset(MACHINE_KEY + name, mapping={
            "inventory": inventory.model_dump_json(),
            "free_cpus": inventory.cpus,
            "free_ram_mb": inventory.ram_mb,
            "free_gpus": ",".join(map(str, sorted(inventory.gpus))),
            "incarnation": uuid.uuid4().hex,
            # What the scripts rank machines by, so that they need not parse the inventory.
            "cpus": inventory.cpus,
            "labelled": int(labelled),
        })
        pipe.sadd(MACHINES_KEY, name)
        pipe.zadd(MACHINES_BY_LOAD_KEY, {name: 2 if labelled else 0})  # its rank when idle
        pipe.set(HEARTBEAT_KEY + name, time.time(), px=int(self.heartbeat_ttl_s * 1000))
        # The counter starts at a random value: after Redis lost its data (a restart without persistence)
        # counting again from 0 could meet a generation some placer cached, with other machines behind it.
        pipe.set(MACHINES_GENERATION_KEY, secrets.randbelow(2**62), nx=True)
        # Moved also for a machine attaching again under its name: placers re-read it before taking there.
        pipe.incr(MACHINES_GENERATION_KEY)
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
        held = self._leave(keys=scripts.KEYS, args=[*scripts.PREFIXES, name])
        return [self._grant(name, gid, json.loads(value)) for gid, value in zip(held[::2], held[1::2])]

    def _machine_names(self) -> list[str]:
        return sorted(_text(name) for name in self.redis.smembers(MACHINES_KEY))

    def machines(self) -> list[MachineView]:
        names = self._machine_names()
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

    def held(self) -> dict[str, list[Grant]]:
        names = self._machine_names()
        pipe = self.redis.pipeline(transaction=False)
        for name in names:
            pipe.hgetall(GRANTS_KEY + name)
            pipe.hget(MACHINE_KEY + name, "incarnation")  # a grants hash is void once its machine attaches again
        replies = pipe.execute()
        held: dict[str, list[Grant]] = {}
        for name, grants, incarnation in zip(names, replies[::2], replies[1::2]):
            born = incarnation.decode() if isinstance(incarnation, bytes) else incarnation
            held[name] = [self._grant(name, gid, json.loads(value)).model_copy(update={"incarnation": born})
                          for gid, value in sorted(grants.items())]
        return held

    def alive(self, name: str) -> bool:
        return bool(self.redis.exists(HEARTBEAT_KEY + name))

    def inventories(self, cached: bool = False) -> Sequence[Inventory]:
        """Every live machine's inventory, sorted by name.

        Uncached: one round trip, which also detaches the machines whose heartbeat expired, and reads the
        inventories again only when a machine attached or left. Cached (for claims): no round trip while
        the cache is younger than the heartbeat's time to live, so a dead machine that no claim picks is
        still noticed within about two of them.
        """
        cache = self._cache
        if cache is None or not cached or time.monotonic() - cache.read_at > self.heartbeat_ttl_s:
            cache = self._refresh()
        return cache.inventories

    def _refresh(self) -> _Cache:
        known = self._cache
        reply = self._look(keys=scripts.KEYS, args=[*scripts.PREFIXES, known.generation if known else ""])
        generation, pairs = reply[0].decode(), reply[1:]
        if known is not None and generation == known.generation:  # same machines: plans made on them hold
            fresh = _Cache(generation, known.inventories, known.parsed, time.monotonic())
        else:
            old = known.parsed if known else {}
            parsed: dict[str, tuple[bytes, Inventory]] = {}
            for raw_name, body in zip(pairs[::2], pairs[1::2]):
                name = raw_name.decode()
                seen = old.get(name)
                # Only new or changed inventories are parsed: a thousand machines, one attach, one parse.
                parsed[name] = seen if seen and seen[0] == body else (body, Inventory.model_validate_json(body))
            inventories = tuple(parsed[name][1] for name in sorted(parsed))
            fresh = _Cache(generation, inventories, parsed, time.monotonic())
        # Threads may refresh at once, and a take may then send a newer generation than its plan was made
        # at. The worst that does is one claim planned on the machines of a moment ago (it waits, or takes
        # a good machine rather than the best); the next claim plans on the newer inventories.
        self._cache = fresh
        return fresh

    # -- grants ---------------------------------------------------------------------------------

    def take_best(self, candidates: Sequence[str] | None, resources: Resources, grant_id: str,
                  clamped_from: Resources | None = None,
                  planned_on: Sequence[Inventory] | None = None) -> Grant | None:
        cache = self._cache
        if planned_on is not None and (cache is None or cache.inventories is not planned_on):
            # Another thread of this process read newer inventories since the plan was made (a machine
            # left, or came back with other labels): the script would check the newer generation, and
            # might grant a call on a machine that no longer consumes its label's queue. Plan again.
            raise MachinesChanged("the machines changed since the placement was planned")
        generation = cache.generation if cache is not None else ""  # nothing read yet: the script says stale
        reply = self._take_best(keys=scripts.KEYS, args=[
            *scripts.PREFIXES, generation, resources.cpus, resources.gpus, resources.ram_mb, grant_id,
            clamped_from.model_dump_json() if clamped_from else "",
            "" if candidates is None else json.dumps(list(candidates)),
        ])
        kind = reply[0]
        if kind == b"granted":
            _, machine, cpus, ram_mb, gpus, incarnation = reply
            return Grant(id=grant_id, machine=machine.decode(), cpus=int(cpus), ram_mb=int(ram_mb),
                         gpus=_ids(gpus), clamped_from=clamped_from,
                         incarnation=incarnation.decode() if incarnation is not None else None)
        if kind == b"none":
            return None
        self._refresh()
        raise MachinesChanged("a machine attached or left since the placement was planned")

    def claim(self, ask: Ask, planned_on: Sequence[Inventory] | None, now: float,
              stale_after_s: float | None = None) -> tuple[Grant, int] | Refusal:
        cache = self._cache
        if planned_on is not None and (cache is None or cache.inventories is not planned_on):
            raise MachinesChanged("the machines changed since the placement was planned")  # as take_best
        generation = cache.generation if cache is not None else ""  # nothing read yet: the script says stale
        kind_id, kind_json = ask.kind.encoded
        listing = json.dumps({"run_id": ask.run_id, "node": ask.node, "priority": ask.priority,
                              "pool": ask.kind.pool, "label": ask.label})
        reply = self._claim(keys=redis_claim.KEYS, args=[
            *scripts.PREFIXES, WAIT_KIND_KEY, generation, ask.call_id,
            ask.clamped_from.model_dump_json() if ask.clamped_from else "", kind_id, kind_json,
            order_key(ask.priority, now, ask.call_id), repr(now),
            "" if stale_after_s is None else repr(now - stale_after_s), listing, ask.reason, ask.detail or "",
        ])
        kind = reply[0]
        if kind == b"granted":
            _, machine, cpus, ram_mb, gpus, group, incarnation = reply
            return Grant(id=ask.call_id, machine=machine.decode(), cpus=int(cpus), ram_mb=int(ram_mb),
                         gpus=_ids(gpus), clamped_from=ask.clamped_from, pool=ask.kind.pool,
                         incarnation=incarnation.decode() if incarnation is not None else None), int(group)
        if kind == b"waiting":
            return Refusal(Why(reply[1].decode()), reply[2].decode())
        self._refresh()
        raise MachinesChanged("a machine attached or left since the placement was planned")

    def pool_holders(self, pools: Sequence[str]) -> dict[str, list[str]]:
        pipe = self.redis.pipeline(transaction=False)
        for pool in pools:
            pipe.hkeys(POOL_KEY + pool)
        return {pool: sorted(_text(holder) for holder in holders)
                for pool, holders in zip(pools, pipe.execute(), strict=True)}

    tells = True  # START and GIVE send a Tell on in the same script

    def start(self, grant: Grant, token: str, tell: Tell | None = None) -> bool:
        said = [tell.key, tell.text] if tell is not None else []
        return bool(self._start(keys=[GRANTS_KEY + grant.machine], args=[grant.id, token, *said]))

    def given_back(self, grants: Sequence[Grant]) -> set[str]:
        if not grants:
            return set()
        pipe = self.redis.pipeline(transaction=False)
        for grant in grants:
            pipe.hexists(GRANTS_KEY + grant.machine, grant.id)
        return {grant.id for grant, held in zip(grants, pipe.execute(), strict=True) if not held}

    def give(self, grant: Grant, tell: Tell | None = None) -> bool:
        pushed: list[str | int] = [tell.key, tell.text, tell.ttl_s] if tell is not None else []
        return bool(self._give(keys=[*scripts.KEYS, WAIT_KINDS_KEY],
                               args=[*scripts.PREFIXES, grant.machine, grant.id, WAIT_KIND_KEY, *pushed]))

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
                     clamped_from=clamped, pool=body.get("pool") or None)

    # -- waiting --------------------------------------------------------------------------------

    def keep_waiting(self, call_ids: Sequence[str], now: float) -> None:
        if call_ids:
            self.redis.hset(WAITING_SEEN_KEY, mapping=dict.fromkeys(call_ids, now))

    def forget_waiting(self, call_id: str) -> None:
        self._forget(keys=redis_claim.LIST_KEYS, args=[call_id, WAIT_KIND_KEY, CHANGES_CHANNEL])

    def waiting(self, stale_after_s: float | None = None) -> list[WaitingCall]:
        pipe = self.redis.pipeline(transaction=True)
        pipe.hgetall(WAITING_KEY)
        pipe.hgetall(WAITING_SEEN_KEY)
        bodies, seen = pipe.execute()
        oldest = None if stale_after_s is None else self._clock() - stale_after_s
        calls, stale = [], []
        for raw_id, body in bodies.items():
            data = json.loads(body)
            seen_at = float(seen.get(raw_id, data["since"]))
            if oldest is not None and seen_at < oldest:
                stale.append(raw_id)  # its driver died with the call on the list: nobody keeps it any more
                continue
            call_id = raw_id.decode()
            priority = int(data.get("priority") or 0)
            calls.append(WaitingCall(call_id, data["run_id"], data["node"], data["reason"], data["since"],
                                     seen_at=seen_at, priority=priority, pool=data.get("pool") or None,
                                     order=data.get("order") or order_key(priority, data["since"], call_id),
                                     label=data.get("label") or None))
        # Marks of calls no longer listed (kept just as they were taken off) go too.
        stale += [raw_id for raw_id in seen if raw_id not in bodies]
        if stale:  # checked again inside the script: a driver may have kept one meanwhile
            self._prune_waiting(keys=redis_claim.LIST_KEYS, args=[oldest or 0, WAIT_KIND_KEY, *stale])
        return sorted(calls, key=lambda call: call.order)

    # -- change notifications ---------------------------------------------------------------------

    names_calls = True

    def on_change(self, callback: Callable[[Change], None]) -> None:
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
                self._fire(Change())
                while not self._stopping.is_set():
                    message = pubsub.get_message(timeout=1.0)
                    if message is not None:
                        self._fire(heard(message.get("data")))
            except redis.RedisError:
                log.warning("lost the placer change channel; resubscribing", exc_info=True)
                self._stopping.wait(0.5)
            finally:
                pubsub.close()

    def _fire(self, change: Change) -> None:
        with self._lock:
            callbacks = list(self._callbacks)
        for callback in callbacks:
            try:
                callback(change)
            except Exception:
                log.exception("a placer change listener failed")

    def close(self) -> None:
        self._stopping.set()
        if self._listener is not None:
            self._listener.join(2)


def heard(data: bytes | str | None) -> Change:
    """A change as the scripts publish it: ``turn``, ``give``, ``room``, ``pool``, …, then, when they name the
    calls it may let go, ``:`` and their ids, comma-separated (``give:c1,c7``; ``give:`` names none). All but
    ``turn`` are changes of any kind."""
    text = data.decode(errors="replace") if isinstance(data, bytes) else (data or "")
    what, named, names = text.partition(":")
    return Change(TURN if what == TURN else ANY_CHANGE,
                  frozenset(name for name in names.split(",") if name) if named else None)
