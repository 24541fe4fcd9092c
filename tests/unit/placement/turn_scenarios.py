"""Sharing machines fairly: waiting calls granted by priority then age, backfill that never overtakes a call
that could use what is free, and pools of slots. Each is written against ``Placer(…)`` as this module names it:
tests/unit/placement/test_turns.py runs every one on memory books, tests/integration/test_redis_books.py on
Redis books (swapping this module's ``Placer`` for one built on them)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fluksio.errors import PlacementError
from fluksio.placement.placer import Placer, Request, Waiting
from fluksio.placement.turns import WaitQueue, Why, call_of, order_key
from fluksio.schemas import Grant, Inventory, Resources
from tests.unit.placement.machines import Clock, machine

SCENARIOS: list[Callable[[], None]] = []


def scenario(behaviour: Callable[[], None]) -> Callable[[], None]:
    """Lists the behaviour in ``SCENARIOS``, in the order of this module."""
    SCENARIOS.append(behaviour)
    return behaviour


def placer_with(*inventories: Inventory, pools: dict[str, int] | None = None, stale_after_s: float | None = None,
                clock: Clock | None = None) -> Placer:
    placer = Placer(clock=clock or Clock(), pools=pools, stale_after_s=stale_after_s)
    for inventory in inventories:
        placer.attach(inventory)
    return placer


def ask(call_id: str, priority: int = 0, cpus: int = 1, gpus: int = 0, device: str | None = None,
        pool: str | None = None, run_id: str | None = None) -> Request:
    return Request(call_id, Resources(cpus=cpus, gpus=gpus), device=device, run_id=run_id or f"run-{call_id}",
                   node=call_id, priority=priority, pool=pool)


def granted(outcome: Grant | Waiting) -> Grant:
    assert isinstance(outcome, Grant), outcome
    return outcome


def waits(outcome: Grant | Waiting, why: Why | None = None) -> Waiting:
    assert isinstance(outcome, Waiting), outcome
    if why is not None:
        assert outcome.why is why, outcome
    return outcome


def waiting_order(placer: Placer) -> list[tuple[str, int]]:
    return [(w["node"], w["priority"]) for w in placer.snapshot()["waiting"]]


# -- the order: priority, then age -------------------------------------------------------------------


@scenario
def a_freed_cpu_goes_to_the_highest_priority_whoever_claims_first():
    clock = Clock()
    placer = placer_with(machine("m", cpus=1), clock=clock)
    hog = granted(placer.try_claim(ask("hog")))
    for i in range(5):
        waits(placer.try_claim(ask(f"low{i}")))
        clock.advance(1)
    waits(placer.try_claim(ask("high", priority=10)))  # submitted last
    placer.release(hog)
    for i in range(5):  # their drivers happen to claim first: each is held back for the higher one
        outcome = waits(placer.try_claim(ask(f"low{i}")), Why.BEHIND)
        assert "high of run run-high, priority 10" in outcome.reason
    assert granted(placer.try_claim(ask("high", priority=10))).machine == "m"


@scenario
def among_equal_priorities_the_oldest_waiting_goes_first():
    clock = Clock()
    placer = placer_with(machine("m", cpus=1), clock=clock)
    hog = granted(placer.try_claim(ask("hog")))
    waits(placer.try_claim(ask("older")))
    clock.advance(0.5)
    waits(placer.try_claim(ask("younger")))
    placer.release(hog)
    waits(placer.try_claim(ask("younger")), Why.BEHIND)
    granted(placer.try_claim(ask("older")))


@scenario
def waiting_again_keeps_a_calls_place():
    clock = Clock()
    placer = placer_with(machine("m", cpus=1), clock=clock)
    hog = granted(placer.try_claim(ask("hog")))
    waits(placer.try_claim(ask("first")))
    clock.advance(1)
    waits(placer.try_claim(ask("second")))
    for _ in range(3):  # the first's driver keeps asking: it stays first
        clock.advance(1)
        waits(placer.try_claim(ask("first")))
    placer.release(hog)
    waits(placer.try_claim(ask("second")), Why.BEHIND)
    granted(placer.try_claim(ask("first")))


@scenario
def the_placer_lists_waiting_calls_in_the_order_they_will_be_granted():
    clock = Clock()
    placer = placer_with(machine("m", cpus=1), clock=clock)
    granted(placer.try_claim(ask("hog")))
    for name, priority in (("a", 0), ("b", 5), ("c", 0), ("d", 5), ("e", -3)):
        waits(placer.try_claim(ask(name, priority=priority)))
        clock.advance(2)
    assert waiting_order(placer) == [("b", 5), ("d", 5), ("a", 0), ("c", 0), ("e", -3)]
    ages = [w["waiting_s"] for w in placer.snapshot()["waiting"]]
    assert ages == [8.0, 4.0, 10.0, 6.0, 2.0]


@scenario
def a_forgotten_call_gives_up_its_place():
    placer = placer_with(machine("m", cpus=1))
    hog = granted(placer.try_claim(ask("hog")))
    waits(placer.try_claim(ask("high", priority=9)))
    waits(placer.try_claim(ask("low")))
    placer.forget("high")  # its run was cancelled
    placer.release(hog)
    granted(placer.try_claim(ask("low")))


# -- backfill that never overtakes ---------------------------------------------------------------------


@scenario
def a_free_cpu_goes_to_a_cpu_call_while_a_gpu_call_waits_for_a_gpu():
    placer = placer_with(machine("box", cpus=4, gpus=(0,), labels=("gpu",)))
    granted(placer.try_claim(ask("trainer", cpus=1, gpus=1, device="gpu")))
    waits(placer.try_claim(ask("eval", priority=10, cpus=1, gpus=1, device="gpu")), Why.MACHINES)
    backfill = granted(placer.try_claim(ask("etl", priority=0, cpus=2)))  # the GPU call cannot use the cpus
    assert backfill.machine == "box"


@scenario
def backfill_never_takes_what_a_waiting_call_ahead_could_use():
    placer = placer_with(machine("box", cpus=2, gpus=(0,), labels=("gpu",)))
    trainer = granted(placer.try_claim(ask("trainer", cpus=1, gpus=1, device="gpu")))
    waits(placer.try_claim(ask("eval", priority=10, cpus=1, gpus=1, device="gpu")))
    granted(placer.try_claim(ask("etl-1")))  # backfills the free cpu
    placer.release(trainer)  # one cpu and the GPU free: the GPU call ahead can use them
    outcome = waits(placer.try_claim(ask("etl-2")), Why.BEHIND)
    assert "eval of run run-eval, priority 10" in outcome.reason
    assert granted(placer.try_claim(ask("eval", priority=10, cpus=1, gpus=1, device="gpu"))).gpus == (0,)


@scenario
def a_later_call_takes_what_is_left_once_the_calls_ahead_have_their_share():
    placer = placer_with(machine("m", cpus=4))
    hog = granted(placer.try_claim(ask("hog", cpus=4)))
    waits(placer.try_claim(ask("a", priority=5, cpus=1)))
    waits(placer.try_claim(ask("b", priority=5, cpus=2)))
    placer.release(hog)
    granted(placer.try_claim(ask("late", cpus=1)))  # a and b take three cpus on paper: one is left
    waits(placer.try_claim(ask("later", cpus=1)), Why.BEHIND)  # none is left now
    granted(placer.try_claim(ask("b", priority=5, cpus=2)))
    granted(placer.try_claim(ask("a", priority=5, cpus=1)))


@scenario
def a_later_call_gets_another_machine_than_the_one_the_call_ahead_would_take():
    placer = placer_with(machine("a", cpus=1), machine("b", cpus=1))
    hog_a = granted(placer.try_claim(ask("hog-a", device="a")))
    hog_b = granted(placer.try_claim(ask("hog-b", device="b")))
    waits(placer.try_claim(ask("first", priority=1)))
    placer.release(hog_a)
    placer.release(hog_b)
    assert granted(placer.try_claim(ask("second"))).machine == "b"  # the first would take a (by name)
    assert granted(placer.try_claim(ask("first", priority=1))).machine == "a"


@scenario
def a_call_ahead_on_other_machines_does_not_hold_back_a_call_that_cannot_use_them():
    placer = placer_with(machine("box", cpus=1, labels=("gpu",)), machine("laptop", cpus=1))
    granted(placer.try_claim(ask("on-box", cpus=1, device="gpu")))
    hog = granted(placer.try_claim(ask("on-laptop", cpus=1, device="laptop")))
    waits(placer.try_claim(ask("anywhere", priority=10)))
    waits(placer.try_claim(ask("box-only", priority=0, device="gpu")))
    placer.release(hog)  # the laptop frees: the high call takes it, the box-only call goes on waiting
    waits(placer.try_claim(ask("box-only", device="gpu")), Why.MACHINES)
    assert granted(placer.try_claim(ask("anywhere", priority=10))).machine == "laptop"


@scenario
def a_call_ahead_whose_driver_died_holds_nobody_back_once_stale():
    clock = Clock()
    placer = placer_with(machine("m", cpus=1), stale_after_s=30, clock=clock)
    hog = granted(placer.try_claim(ask("hog")))
    waits(placer.try_claim(ask("orphan", priority=10)))  # its driver dies now: nobody keeps it listed
    clock.advance(20)
    waits(placer.try_claim(ask("alive")))
    placer.release(hog)
    waits(placer.try_claim(ask("alive")), Why.BEHIND)  # the orphan is not stale yet
    clock.advance(15)
    placer.keep_waiting(["alive"])
    granted(placer.try_claim(ask("alive")))
    assert waiting_order(placer) == []  # the orphan was dropped from the books, not only passed over


# -- pools -------------------------------------------------------------------------------------------


@scenario
def a_pool_grants_no_more_slots_than_it_has_on_any_machine():
    placer = placer_with(machine("a", cpus=4), machine("b", cpus=4), pools={"licenses": 2})
    first = granted(placer.try_claim(ask("s1", pool="licenses")))
    second = granted(placer.try_claim(ask("s2", pool="licenses")))
    assert first.pool == second.pool == "licenses"
    outcome = waits(placer.try_claim(ask("s3", pool="licenses")), Why.POOL)
    assert outcome.reason == "waiting for pool 'licenses' (2/2 in use)"
    granted(placer.try_claim(ask("free-of-pools")))  # cpus are free: only the pool is full
    [pool] = placer.snapshot()["pools"]
    assert pool == {"name": "licenses", "slots": 2, "in_use": 2, "calls": ["s1", "s2"]}
    [listed] = placer.snapshot()["waiting"]
    assert (listed["node"], listed["pool"], listed["reason"]) == ("s3", "licenses", outcome.reason)
    placer.release(first)
    assert granted(placer.try_claim(ask("s3", pool="licenses"))).pool == "licenses"


@scenario
def a_pool_slot_goes_to_the_call_ahead():
    placer = placer_with(machine("m", cpus=8), pools={"db": 1})
    holder = granted(placer.try_claim(ask("holder", pool="db")))
    waits(placer.try_claim(ask("urgent", priority=3, pool="db")))
    waits(placer.try_claim(ask("routine", pool="db")))
    placer.release(holder)
    waits(placer.try_claim(ask("routine", pool="db")), Why.BEHIND)
    granted(placer.try_claim(ask("urgent", priority=3, pool="db")))


@scenario
def a_pool_slot_comes_back_when_its_machine_leaves_or_restarts():
    placer = placer_with(machine("a", cpus=2), machine("b", cpus=2), pools={"licenses": 1})
    granted(placer.try_claim(Request("on-a", Resources(), device="a", pool="licenses")))
    placer.detach("a")  # its worker died: the grant is void, and so is its slot
    assert placer.snapshot()["pools"][0]["in_use"] == 0
    granted(placer.try_claim(Request("on-b", Resources(), device="b", pool="licenses")))
    placer.attach(machine("b", cpus=2))  # b restarted: the grants of its earlier start are void
    assert placer.snapshot()["pools"][0]["in_use"] == 0
    granted(placer.try_claim(ask("next", pool="licenses")))


@scenario
def a_pool_the_placer_does_not_know_is_refused_with_the_pools_there_are():
    placer = placer_with(machine("m"), pools={"licenses": 4, "db": 1})
    with pytest.raises(PlacementError, match=r"pool 'gpus' is not one of this installation's pools \(db, licenses\)"):
        placer.try_claim(ask("c1", pool="gpus"))


# -- who waits, as a monitoring system counts it ----------------------------------------------------------


@scenario
def each_waiting_call_is_listed_with_its_label_and_a_reason_of_a_known_kind():
    from fluksio.placement.reasons import WaitKind, wait_kind

    placer = placer_with(machine("box", cpus=1, labels=("gpu",)), pools={"licenses": 1})
    hog = granted(placer.try_claim(ask("hog", pool="licenses")))
    waits(placer.try_claim(ask("tpu", device="tpu")), Why.MACHINES)  # no machine carries the label
    waits(placer.try_claim(ask("busy", device="gpu")), Why.MACHINES)  # the one that does is full
    waits(placer.try_claim(ask("licensed", pool="licenses")), Why.POOL)
    placer.release(hog)
    waits(placer.try_claim(ask("late")), Why.BEHIND)  # "busy" waited first and can use the free cpu now
    listed = {w["node"]: (w["label"], wait_kind(w["reason"])) for w in placer.snapshot()["waiting"]}
    assert listed == {"tpu": ("tpu", WaitKind.NO_MACHINE), "busy": ("gpu", WaitKind.RESOURCES),
                      "licensed": (None, WaitKind.POOL), "late": (None, WaitKind.TURN)}


# -- the order's keys and queue (pure) ------------------------------------------------------------------


@scenario
def order_keys_sort_by_priority_then_time_then_call_bytewise():
    keys = [order_key(0, 100.0, "b"), order_key(10, 200.0, "a"), order_key(0, 100.0, "a"),
            order_key(-2**31, 1.0, "z"), order_key(2**31 - 1, 300.0, "y"), order_key(0, 99.999, "c")]
    assert [call_of(k) for k in sorted(keys)] == ["y", "a", "c", "a", "b", "z"]
    assert [call_of(k) for k in sorted(keys, key=str.encode)] == [call_of(k) for k in sorted(keys)]


@scenario
def the_queue_offers_one_call_per_kind_that_cannot_go():
    from fluksio.placement.turns import Kind

    cpu, gpu = Kind(Resources(cpus=1), (None,)), Kind(Resources(gpus=1), (None,))
    queue = WaitQueue()
    for i in range(100):
        queue.add(gpu if i % 2 else cpu, order_key(0, float(i), f"c{i:03d}"))
    offered = []

    def play(kind: Kind, order: str) -> bool:
        offered.append(call_of(order))
        return kind == cpu and len(offered) < 5  # three cpu calls go, then none can

    queue.play_ahead(order_key(0, 1000.0, "mine"), play)
    assert offered == ["c000", "c001", "c002", "c004", "c006"]  # the gpu kind stopped at c001, cpu at c006
