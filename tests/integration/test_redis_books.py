"""Redis books against a real redis-server: one round trip per claim, the same choices as memory books,
no over-commit between racing placers, and machines that attach, die or restart noticed."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fluksio.constants import CHANGES_CHANNEL, HEARTBEAT_KEY, MACHINE_KEY, MACHINES_BY_LOAD_KEY, MACHINES_KEY
from fluksio.placement.backend import ANY_CHANGE, TURN, Change, MachinesChanged
from fluksio.placement.memory import MemoryBooks
from fluksio.placement.placer import Placer, Request, Waiting
from fluksio.placement.redis import RedisBooks, heard
from fluksio.placement.turns import Why
from fluksio.schemas import DevicePolicy, Grant, Inventory, Resources
from tests.integration.support.servers import RedisServer
from tests.unit.placement import placer_scenarios, turn_scenarios

pytestmark = pytest.mark.integration


@pytest.fixture
def connect(redis_server: RedisServer) -> Iterator:
    """Books on a fresh database; each call is another placer process with its own connection."""
    redis.Redis.from_url(redis_server.url).flushall()
    made: list[RedisBooks] = []

    def books(heartbeat_ttl_s: float = 60, client: redis.Redis | None = None, clock=time.time) -> RedisBooks:
        made.append(RedisBooks(client or redis.Redis.from_url(redis_server.url), heartbeat_ttl_s, clock=clock))
        return made[-1]

    yield books
    for opened in made:
        opened.close()
        opened.redis.close()


def machine(name, cpus=4, gpus=(), ram_mb=8000, labels=()) -> Inventory:
    return Inventory(name=name, cpus=cpus, gpus=tuple(gpus), ram_mb=ram_mb, labels=tuple(labels))


def free_cpus(books) -> dict[str, int]:
    return {view.inventory.name: view.free.cpus for view in books.machines()}


# -- every placer behaviour, on Redis books ----------------------------------------------------------


def on_redis(connect):  # noqa: ANN001, ANN201
    """``Placer(…)`` as the placement scenarios call it, built on Redis books (that read the test's clock)."""
    return lambda books=None, provisioner_shapes=(), clock=time.time, **options: Placer(
        connect(clock=clock), provisioner_shapes, clock=clock, **options)


# The placer's behaviours any books must show (what only memory books show is tested in
# tests/unit/placement/test_placer.py).
@pytest.mark.parametrize("behaviour", placer_scenarios.SCENARIOS, ids=lambda behaviour: behaviour.__name__)
def test_the_placer_behaves_the_same_on_redis_books(behaviour: Callable[[], None], connect, monkeypatch) -> None:
    # The scenarios build their placers with Placer(…): here each is built on Redis books instead.
    monkeypatch.setattr(placer_scenarios, "Placer", on_redis(connect))
    behaviour()


# Fair sharing: every scenario, on Redis books.
@pytest.mark.parametrize("behaviour", turn_scenarios.SCENARIOS, ids=lambda behaviour: behaviour.__name__)
def test_waiting_calls_take_their_turns_the_same_on_redis_books(behaviour: Callable[[], None], connect,
                                                                 monkeypatch) -> None:
    monkeypatch.setattr(turn_scenarios, "Placer", on_redis(connect))
    behaviour()


def test_detach_returns_the_grants_the_machine_held(connect) -> None:
    placer = Placer(connect())
    placer.attach(machine("laptop"))
    grant = placer.try_claim(Request("c1", Resources(cpus=2)))
    [held] = placer.detach("laptop")
    assert (held.id, held.machine, held.cpus) == (grant.id, "laptop", 2)
    assert placer.release(grant) is False
    assert placer.machines() == []


# -- one round trip ----------------------------------------------------------------------------------


class CountingConnection(redis.Connection):
    """Counts what the client sends: one ``send_packed_command`` is one round trip (pipelines included)."""

    sent: list[str] = []

    def send_packed_command(self, command, check_health=True):
        parts = command if isinstance(command, list) else [command]
        first = bytes(parts[0])
        CountingConnection.sent.append(first.split(b"\r\n")[2].decode())  # the command's name
        super().send_packed_command(command, check_health)


def test_a_claim_is_one_round_trip_and_so_is_a_give_back(connect, redis_server: RedisServer) -> None:
    for_setup = connect()
    for i in range(100):
        for_setup.attach(machine(f"m{i:03d}", cpus=8, labels=("gpu",) if i % 2 else ()))
    pool = redis.ConnectionPool(connection_class=CountingConnection, host="127.0.0.1", port=redis_server.port)
    placer = Placer(connect(client=redis.Redis(connection_pool=pool)))
    for warm in ("any", "gpu"):  # the first claims read the inventories once
        placer.release(placer.try_claim(Request(f"warm-{warm}", Resources(cpus=1), None if warm == "any" else warm)))
    CountingConnection.sent.clear()
    for i in range(20):
        unlabelled = placer.try_claim(Request(f"a{i}", Resources(cpus=1)))
        labelled = placer.try_claim(Request(f"g{i}", Resources(cpus=1), "gpu"))
        assert isinstance(unlabelled, Grant) and isinstance(labelled, Grant)
        assert labelled.queue_label == "gpu" and int(labelled.machine[1:]) % 2 == 1
        placer.release(unlabelled)
        placer.release(labelled)
    assert CountingConnection.sent == ["EVALSHA"] * 80  # 40 claims, 40 give-backs, nothing else
    held = placer.try_claim(Request("hog", Resources(cpus=8), "m001"))
    CountingConnection.sent.clear()
    for i in range(20):  # waiting (listed, in its turn, with its reason) costs the claim's one round trip too
        assert isinstance(placer.try_claim(Request("waits", Resources(cpus=2), "m001", priority=i % 3)), Waiting)
    assert CountingConnection.sent == ["EVALSHA"] * 20
    placer.release(held)


# -- the same choices as memory books -----------------------------------------------------------------

FLEET = [machine("a", cpus=3, gpus=(0, 1), ram_mb=4000), machine("b", cpus=6, ram_mb=2000),
         machine("c", cpus=2, gpus=(0,), ram_mb=8000, labels=("gpu",)), machine("d", cpus=4, labels=("big",))]
steps = st.lists(st.one_of(
    st.tuples(st.just("take"), st.integers(0, 3), st.integers(0, 1), st.sampled_from([0, 1000, 3000]),
              st.sampled_from([None, ("a", "b"), ("b", "c", "d"), ("c",)])),
    st.tuples(st.just("give"), st.integers(0, 30)),
), max_size=30)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps)
def test_redis_books_choose_exactly_as_memory_books_do(connect, ops) -> None:
    redis_books, memory = connect(), MemoryBooks()
    redis_books.redis.flushall()
    for inventory in FLEET:
        redis_books.attach(inventory)
        memory.attach(inventory)
    redis_books.inventories()  # what a placer reads before its first claim
    held: list[tuple[Grant, Grant]] = []
    for n, op in enumerate(ops):
        if op[0] == "take":
            _, cpus, gpus, ram_mb, candidates = op
            want = Resources(cpus=cpus, gpus=gpus, ram_mb=ram_mb)
            in_redis = redis_books.take_best(candidates, want, f"c{n}")
            in_memory = memory.take_best(candidates, want, f"c{n}")
            assert (in_redis and (in_redis.machine, in_redis.cpus, in_redis.gpus, in_redis.ram_mb)) == (
                in_memory and (in_memory.machine, in_memory.cpus, in_memory.gpus, in_memory.ram_mb))
            if in_redis is not None:
                held.append((in_redis, in_memory))
        elif held:
            in_redis, in_memory = held.pop(op[1] % len(held))
            assert redis_books.give(in_redis) is memory.give(in_memory) is True
    assert {v.inventory.name: (v.free, v.free_gpus) for v in redis_books.machines()} == {
        v.inventory.name: (v.free, tuple(v.free_gpus)) for v in memory.machines()}


def test_preference_unlabelled_then_least_loaded_then_name(connect) -> None:
    books = connect()
    for inventory in (machine("a-gpu", cpus=32, labels=("gpu",)), machine("m2", cpus=4), machine("m1", cpus=2)):
        books.attach(inventory)
    books.inventories()
    order = [books.take_best(None, Resources(cpus=1), f"c{i}").machine for i in range(7)]
    # m1 (2 cpus) and m2 (4) tie when idle and at 1/2 (the name decides), else the less loaded goes.
    assert order == ["m1", "m2", "m2", "m1", "m2", "m2", "a-gpu"]


def test_a_retried_claim_gets_the_grant_it_has_charged_once(connect) -> None:
    books = connect()
    books.attach(machine("a", cpus=4, gpus=(0, 1)))
    books.inventories()
    first = books.take_best(None, Resources(cpus=2, gpus=1), "c1")
    again = books.take_best(["a"], Resources(cpus=2, gpus=1), "c1")
    assert again == first
    assert free_cpus(books) == {"a": 2}
    assert books.give(first) is True and books.give(again) is False
    assert free_cpus(books) == {"a": 4}


# -- racing placers ------------------------------------------------------------------------------------


def test_two_placers_racing_for_the_last_cpu_never_both_get_it(connect) -> None:
    one, other = connect(), connect()
    one.attach(machine("box", cpus=1))
    for books in (one, other):
        books.inventories()
    for round_ in range(30):
        start = threading.Barrier(2)
        won: list[Grant] = []

        def take(books: RedisBooks, name: str) -> None:
            start.wait()
            grant = books.take_best(None, Resources(cpus=1), f"{name}-{round_}")
            if grant is not None:
                won.append(grant)

        racers = [threading.Thread(target=take, args=(b, n)) for b, n in ((one, "one"), (other, "other"))]
        for racer in racers:
            racer.start()
        for racer in racers:
            racer.join()
        assert len(won) == 1, won
        assert free_cpus(one) == {"box": 0}
        assert other.give(won[0]) is True


def test_many_placers_fill_a_machine_exactly(connect) -> None:
    placers = [Placer(connect()) for _ in range(4)]
    placers[0].attach(machine("box", cpus=5, gpus=(0, 1, 2)))
    start = threading.Barrier(20)
    outcomes: list[Grant | Waiting] = []

    def claim(i: int) -> None:
        start.wait()
        outcomes.append(placers[i % 4].try_claim(Request(f"c{i}", Resources(cpus=1, gpus=i % 2))))

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    grants = [o for o in outcomes if isinstance(o, Grant)]
    assert len(grants) == 5
    gpu_ids = [gpu for grant in grants for gpu in grant.gpus]
    assert len(gpu_ids) == len(set(gpu_ids)) <= 3
    [box] = placers[1].books.machines()
    assert box.free.cpus == 0 and box.calls == 5


ROOT = Path(__file__).resolve().parents[2]


def test_driver_processes_racing_for_a_freed_gpu_get_it_in_their_turns(connect, redis_server: RedisServer) -> None:
    books = connect()
    placer = Placer(books)
    placer.attach(machine("box", cpus=8, gpus=(0,), labels=("gpu",)))
    hog = placer.try_claim(Request("hog", Resources(cpus=1, gpus=1), "gpu"))
    calls = [("low-a", 0), ("low-b", 0), ("mid", 5), ("low-c", 0), ("high", 10)]
    drivers = []
    try:
        for call_id, priority in calls:  # one process each, listing its call in this order (so by age)
            drivers.append(subprocess.Popen([sys.executable, "-m", "tests.integration.support.placer_driver",
                                             redis_server.url, call_id, str(priority)], cwd=ROOT))
            assert books.redis.blpop(["ready"], timeout=60) == (b"ready", call_id.encode())
        for call_id, _priority in calls:
            books.redis.rpush(f"go:{call_id}", 1)
        placer.release(hog)  # every driver is woken and claims at once; each gets the GPU only in its turn
        for driver in drivers:
            assert driver.wait(60) == 0
    finally:
        for driver in drivers:
            if driver.poll() is None:
                driver.kill()
                driver.wait(10)
    assert [c.decode() for c in books.redis.lrange("order", 0, -1)] == ["high", "mid", "low-a", "low-b", "low-c"]
    assert placer.snapshot()["waiting"] == []


def changes_heard(books: RedisBooks):
    """A subscription to the books' changes, and a function returning the next message published there."""
    subscription = books.redis.pubsub(ignore_subscribe_messages=True)
    subscription.subscribe(CHANGES_CHANNEL)
    subscription.get_message(timeout=5)  # the subscription's own confirmation

    def next_message() -> str:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            message = subscription.get_message(timeout=1)
            if message is not None:
                return message["data"].decode()
        raise AssertionError("no change was published")

    return subscription, next_message


def test_a_give_back_names_the_first_waiting_call_and_a_grant_names_the_next_only_when_room_is_left(
        connect) -> None:
    books = connect()
    placer = Placer(books)
    placer.attach(machine("box", cpus=2))
    hogs = [placer.try_claim(Request(f"hog{i}", Resources(cpus=1), run_id="r0")) for i in range(2)]
    for i in range(1, 4):
        assert isinstance(placer.try_claim(Request(f"w{i}", Resources(cpus=1), run_id=f"r{i}")), Waiting)
    subscription, next_message = changes_heard(books)
    try:
        placer.release(hogs[0])
        assert next_message() == "give:w1"  # the first in the order: only its process wakes it
        placer.release(hogs[1])
        assert next_message() == "give:w1"
        w1 = placer.try_claim(Request("w1", Resources(cpus=1), run_id="r1"))
        assert isinstance(w1, Grant)
        assert next_message() == "room:w2"  # a cpu is left: the next of its kind may go
        w2 = placer.try_claim(Request("w2", Resources(cpus=1), run_id="r2"))
        assert isinstance(w2, Grant)
        placer.release(w2)  # w2's grant took the last cpu, so it named nobody: the give-back is next
        assert next_message() == "give:w3"
        assert isinstance(placer.try_claim(Request("w3", Resources(cpus=1), run_id="r3")), Grant)
        placer.release(w1)
        # Nobody waits: the give-back says nothing. (A marker published after it comes first, in order.)
        books.redis.publish(CHANGES_CHANNEL, "marker")
        assert next_message() == "marker"
    finally:
        subscription.close()


def test_a_grant_names_the_next_of_its_kind_when_room_is_free_though_calls_ahead_would_take_it(connect) -> None:
    # c2 was refused behind X and c1. c1's grant names c2: the cpus left are free, though X would take them
    # on paper. Named only on paper, c2 would never hear again: X giving up its place (a turn) needs someone
    # refused behind it to say so, and c2's refusal was spent on c1's grant. (The ids sort as the calls
    # came: two claims in one millisecond are ordered by id.)
    books = connect()
    placer = Placer(books)
    placer.attach(machine("box", cpus=3))
    hog = placer.try_claim(Request("hog", Resources(cpus=3), run_id="r0"))
    assert isinstance(placer.try_claim(Request("X", Resources(cpus=2), run_id="rx", priority=10)), Waiting)
    assert isinstance(placer.try_claim(Request("c1", Resources(cpus=1), run_id="rc")), Waiting)
    assert isinstance(placer.try_claim(Request("c2", Resources(cpus=1), run_id="ra")), Waiting)
    subscription, next_message = changes_heard(books)
    try:
        placer.release(hog)
        assert heard(next_message().encode()) == Change(ANY_CHANGE, frozenset({"X", "c1"}))
        refused = placer.try_claim(Request("c2", Resources(cpus=1), run_id="ra"))
        assert isinstance(refused, Waiting) and refused.why is Why.BEHIND
        assert isinstance(placer.try_claim(Request("c1", Resources(cpus=1), run_id="rc")), Grant)
        assert next_message() == "turn:X"  # those refused behind c1 may go: X is the first of the other kind
        assert next_message() == "room:c2"
    finally:
        subscription.close()


def test_changes_are_read_back_with_the_calls_they_name() -> None:
    assert heard(b"give:c1,c7") == Change(ANY_CHANGE, frozenset({"c1", "c7"}))
    assert heard(b"turn:c2") == Change(TURN, frozenset({"c2"}))
    assert heard(b"room:c3") == Change(ANY_CHANGE, frozenset({"c3"}))
    assert heard(b"give:") == Change(ANY_CHANGE, frozenset())
    assert heard(b"attach") == Change(ANY_CHANGE, None)  # names nobody: each process wakes its firsts
    assert heard(None) == Change(ANY_CHANGE, None)


# -- machines attaching, dying, restarting --------------------------------------------------------------


def test_a_dead_machine_picked_for_a_claim_is_detached_and_the_claim_planned_again(connect) -> None:
    books = connect()
    books.attach(machine("dead", cpus=8))          # idle and unlabelled: the placer's first choice
    books.attach(machine("alive", cpus=8, labels=("gpu",)))
    assert [i.name for i in books.inventories()] == ["alive", "dead"]
    books.redis.delete(HEARTBEAT_KEY + "dead")     # its worker stopped beating and the key expired
    with pytest.raises(MachinesChanged):
        books.take_best(None, Resources(cpus=1), "c1")
    assert books.redis.smembers(MACHINES_KEY) == {b"alive"}
    assert not books.redis.exists(MACHINE_KEY + "dead")
    assert books.redis.zscore(MACHINES_BY_LOAD_KEY, "dead") is None
    assert [i.name for i in books.inventories(cached=True)] == ["alive"]  # refreshed on the way out
    assert books.take_best(None, Resources(cpus=1), "c1").machine == "alive"


def test_a_placer_skips_a_dead_machine_and_says_when_none_carries_the_label(connect) -> None:
    books = connect()
    placer = Placer(books)
    placer.attach(machine("laptop", cpus=2))
    placer.attach(machine("box", cpus=2, labels=("gpu",)))
    assert placer.try_claim(Request("c0", Resources(cpus=1))).machine == "laptop"
    books.redis.delete(HEARTBEAT_KEY + "laptop")
    grant = placer.try_claim(Request("c1", Resources(cpus=1)))
    assert isinstance(grant, Grant) and grant.machine == "box"
    books.redis.delete(HEARTBEAT_KEY + "box")
    outcome = placer.try_claim(Request("c2", Resources(cpus=1), "gpu"))
    assert outcome == Waiting("waiting for a worker labelled 'gpu'", no_machine=True)
    assert placer.machines() == [] and not placer.carries("gpu")


def test_a_dead_machine_no_claim_picks_is_noticed_once_the_cache_is_older_than_the_heartbeat(connect) -> None:
    books = connect(heartbeat_ttl_s=0.6)
    books.attach(machine("idle", cpus=2))
    books.attach(machine("busy", cpus=1))
    books.inventories()
    books.take_best(["busy"], Resources(cpus=1), "c1")
    books.redis.delete(HEARTBEAT_KEY + "busy")
    books.heartbeat(machine("idle", cpus=2))
    assert [i.name for i in books.inventories(cached=True)] == ["busy", "idle"]  # young cache: no look
    time.sleep(0.65)
    books.heartbeat(machine("idle", cpus=2))
    assert [i.name for i in books.inventories(cached=True)] == ["idle"]
    assert books.redis.smembers(MACHINES_KEY) == {b"idle"}


def test_a_machine_attached_by_another_process_is_used_by_the_next_claim(connect) -> None:
    here, elsewhere = Placer(connect()), connect()
    here.attach(machine("old", cpus=2))
    assert here.try_claim(Request("c1", Resources(cpus=1))).machine == "old"  # old is half busy now
    elsewhere.attach(machine("new", cpus=2))
    # The cached plan is stale: the take refuses it, the placer reads the machines again, plans, takes.
    assert here.try_claim(Request("c2", Resources(cpus=1))).machine == "new"
    elsewhere.attach(machine("tpu-box", cpus=2, labels=("tpu",)))
    grant = here.try_claim(Request("c3", Resources(cpus=1), "tpu"))
    assert isinstance(grant, Grant) and (grant.machine, grant.queue_label) == ("tpu-box", "tpu")


def test_a_new_label_attached_elsewhere_ends_a_no_machine_wait_at_once(connect) -> None:
    here, elsewhere = Placer(connect()), connect()
    here.attach(machine("laptop"))
    assert here.try_claim(Request("c1", Resources(), "gpu")).no_machine is True
    elsewhere.attach(machine("box", labels=("gpu",)))
    assert here.try_claim(Request("c1", Resources(), "gpu")).machine == "box"
    assert here.snapshot()["waiting"] == []


def test_a_machine_that_restarted_loses_its_grants_and_grants_under_its_new_incarnation(connect) -> None:
    here, worker = connect(), connect()
    worker.attach(machine("box", cpus=2))
    placer = Placer(here)
    before = placer.try_claim(Request("c1", Resources(cpus=2)))
    assert not placer.lost(before)
    worker.attach(machine("box", cpus=2))  # the worker came back: books afresh, a new incarnation
    current = here.redis.hget(MACHINE_KEY + "box", "incarnation").decode()
    assert current != before.incarnation
    assert placer.lost(before)
    after = placer.try_claim(Request("c2", Resources(cpus=2)))
    assert isinstance(after, Grant) and after.incarnation == current
    assert placer.release(before) is False  # the void grant gives nothing back
    assert free_cpus(here) == {"box": 0}


def test_a_labelled_machine_attached_elsewhere_joins_the_plan_for_its_label(connect) -> None:
    here, elsewhere = Placer(connect()), connect()
    here.attach(machine("gpu-a", cpus=1, labels=("gpu",)))
    assert here.try_claim(Request("c1", Resources(cpus=1), "gpu")).machine == "gpu-a"  # planned: [gpu-a]
    elsewhere.attach(machine("gpu-b", cpus=1, labels=("gpu",)))
    assert here.try_claim(Request("c2", Resources(cpus=1), "gpu")).machine == "gpu-b"


def test_a_bigger_machine_attached_elsewhere_ends_clamping(connect) -> None:
    here, elsewhere = Placer(connect()), connect()
    here.attach(machine("small", cpus=4))
    clamped = here.try_claim(Request("c1", Resources(cpus=8)))
    assert clamped.cpus == 4 and clamped.clamped_from == Resources(cpus=8)
    elsewhere.attach(machine("big", cpus=16))
    grant = here.try_claim(Request("c2", Resources(cpus=8)))
    assert (grant.machine, grant.cpus, grant.clamped_from) == ("big", 8, None)


def test_a_redis_that_lost_its_data_is_noticed(connect) -> None:
    here, elsewhere = Placer(connect()), connect()
    here.attach(machine("old", labels=("gpu",)))
    assert here.try_claim(Request("c1", Resources(), "gpu")).machine == "old"  # planned: [old]
    elsewhere.redis.flushall()  # a restart without persistence: the generation counter starts again
    elsewhere.attach(machine("new", labels=("gpu",)))
    assert here.try_claim(Request("c2", Resources(), "gpu")).machine == "new"


def test_machines_attached_by_an_older_fluksio_are_ranked_on_the_next_look(connect) -> None:
    books = connect()
    books.attach(machine("old", cpus=2))
    books.redis.hdel(MACHINE_KEY + "old", "cpus", "labelled")  # as an older worker wrote its books
    books.redis.zrem(MACHINES_BY_LOAD_KEY, "old")
    books.inventories()
    assert books.redis.zscore(MACHINES_BY_LOAD_KEY, "old") == 0
    assert books.take_best(None, Resources(cpus=1), "c1").machine == "old"


def test_prefer_falls_back_across_placers(connect) -> None:
    here, elsewhere = Placer(connect()), connect()
    here.attach(machine("laptop", cpus=16, ram_mb=64_000))
    elsewhere.attach(machine("box", cpus=2, labels=("gpu",)))
    grant = here.try_claim(Request("c1", Resources(cpus=8), "gpu", DevicePolicy.PREFER))
    assert isinstance(grant, Grant) and grant.machine == "laptop" and grant.queue_label is None


def test_snapshot_still_reads_every_machine(connect) -> None:
    placer = Placer(connect())
    placer.attach(machine("box", cpus=4, gpus=(2, 5), labels=("gpu",)))
    grant = placer.try_claim(Request("c1", Resources(cpus=1, gpus=1), "gpu"))
    [box] = placer.snapshot()["machines"]
    assert box["free"] == {"cpus": 3, "gpus": 1, "ram_mb": 8000}
    assert box["free_gpu_ids"] == [g for g in (2, 5) if g not in grant.gpus] and box["calls"] == 1
    assert box["heartbeat_age_s"] is not None


def test_a_take_planned_on_inventories_another_thread_has_replaced_is_refused(connect) -> None:
    books, worker = connect(), connect()
    worker.attach(machine("box", cpus=2, labels=("gpu",)))
    planned_on = books.inventories()  # a driver thread plans a 'gpu' call: [box]
    worker.attach(machine("box", cpus=2))  # box comes back without its gpu label
    books.inventories()  # another driver thread of this process reads the machines as they are now
    with pytest.raises(MachinesChanged):
        books.take_best(["box"], Resources(cpus=1), "c1", planned_on=planned_on)
    assert free_cpus(books) == {"box": 2}  # nothing taken
    current = books.inventories(cached=True)
    assert books.take_best(["box"], Resources(cpus=1), "c1", planned_on=current).machine == "box"
