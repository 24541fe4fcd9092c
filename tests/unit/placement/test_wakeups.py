"""Who a change of the books wakes: the first waiting call of each kind in this process, not every driver."""

from __future__ import annotations

from collections.abc import Callable

from fluksio.placement.placer import Placer, Request, Waiting
from fluksio.placement.turns import Kind
from fluksio.placement.wakeups import Wakeups
from fluksio.schemas import Grant, Inventory, Resources


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        self.now += 0.01  # every call waits a little later than the one before
        return self.now


def machine(name: str, cpus: int = 1, gpus: tuple[int, ...] = ()) -> Inventory:
    return Inventory(name=name, cpus=cpus, gpus=gpus, ram_mb=8000)


def req(run_id: str, cpus: int = 1, gpus: int = 0, priority: int = 0, pool: str | None = None) -> Request:
    return Request(f"{run_id}.n.1", Resources(cpus=cpus, gpus=gpus), run_id=run_id, node="n", priority=priority,
                   pool=pool)


class Drivers:
    """One listener per run, as each driver registers, recording who was woken."""

    def __init__(self, placer: Placer, runs: list[str]) -> None:
        self.woken: list[str] = []
        self.listeners = {run_id: (lambda run_id=run_id: self.woken.append(run_id)) for run_id in runs}
        for run_id, listener in self.listeners.items():
            placer.add_listener(listener, run_id=run_id)

    def take(self) -> list[str]:
        woken, self.woken = self.woken, []
        return woken


def busy_placer(waiting: int, cpus: int = 1) -> tuple[Placer, list[Grant], list[str]]:
    """A machine of ``cpus`` cpus, all granted, and ``waiting`` runs refused behind them, oldest first."""
    placer = Placer(clock=Clock())
    placer.attach(machine("box", cpus=cpus))
    held = [placer.try_claim(req(f"held{i}")) for i in range(cpus)]
    assert all(isinstance(grant, Grant) for grant in held)
    runs = [f"run{i}" for i in range(waiting)]
    for run_id in runs:
        assert isinstance(placer.try_claim(req(run_id)), Waiting)
    return placer, held, runs


def test_a_give_back_wakes_the_oldest_waiting_driver_alone():
    placer, held, runs = busy_placer(waiting=30)
    drivers = Drivers(placer, runs)
    placer.release(held[0])
    assert drivers.take() == ["run0"]  # not 30 drivers racing for one cpu


def test_a_woken_call_granted_wakes_the_next_of_its_kind():
    placer, held, runs = busy_placer(waiting=5, cpus=2)
    drivers = Drivers(placer, runs)
    placer.release(held[0])
    placer.release(held[1])  # two cpus free; the first change woke run0 (twice: it has not claimed yet)
    assert set(drivers.take()) == {"run0"}
    assert isinstance(placer.try_claim(req("run0")), Grant)
    assert drivers.take() == ["run1"]  # what freed may hold the next one too
    assert isinstance(placer.try_claim(req("run1")), Grant)
    assert drivers.take() == ["run2"]
    assert isinstance(placer.try_claim(req("run2")), Waiting)  # the chain stops where the room does
    assert drivers.take() == []


def test_a_higher_priority_call_is_woken_before_older_ones():
    placer, held, runs = busy_placer(waiting=3)
    assert isinstance(placer.try_claim(req("urgent", priority=5)), Waiting)
    drivers = Drivers(placer, [*runs, "urgent"])
    placer.release(held[0])
    assert drivers.take() == ["urgent"]
    assert isinstance(placer.try_claim(req("run0")), Waiting)  # the woken one's turn is kept
    assert isinstance(placer.try_claim(req("urgent", priority=5)), Grant)


def test_each_kind_s_first_call_is_woken_so_a_cpu_call_backfills_past_a_gpu_one():
    placer = Placer(clock=Clock())
    placer.attach(machine("box", cpus=2, gpus=(0,)))
    gpu_held = placer.try_claim(req("gpu_holder", gpus=1))
    cpu_held = placer.try_claim(req("cpu_holder"))
    assert isinstance(gpu_held, Grant) and isinstance(cpu_held, Grant)
    assert isinstance(placer.try_claim(req("gpu_wait", gpus=1)), Waiting)
    assert isinstance(placer.try_claim(req("cpu_wait")), Waiting)
    assert isinstance(placer.try_claim(req("cpu_later")), Waiting)
    drivers = Drivers(placer, ["gpu_wait", "cpu_wait", "cpu_later"])
    placer.release(cpu_held)
    assert sorted(drivers.take()) == ["cpu_wait", "gpu_wait"]
    assert isinstance(placer.try_claim(req("gpu_wait", gpus=1)), Waiting)  # its GPU is still held
    assert isinstance(placer.try_claim(req("cpu_wait")), Grant)  # the freed cpu: backfill


def test_a_forgotten_or_departed_waiter_does_not_swallow_the_wake_up():
    placer, held, runs = busy_placer(waiting=3)
    drivers = Drivers(placer, runs)
    placer.forget("run0.n.1")  # its run ended while it waited
    placer.remove_listener(drivers.listeners["run1"])  # its driver stopped without forgetting its call
    drivers.take()  # (forgetting may itself be a change)
    placer.release(held[0])
    assert drivers.take() == ["run2"]


def test_listeners_without_a_run_hear_every_change():
    placer, held, runs = busy_placer(waiting=2)
    everything: list[str] = []
    placer.add_listener(lambda: everything.append("change"))
    drivers = Drivers(placer, runs)
    placer.release(held[0])
    assert everything == ["change"] and drivers.take() == ["run0"]


def test_a_driver_without_calls_waiting_is_not_woken():
    placer = Placer(clock=Clock())
    placer.attach(machine("box", cpus=2))
    grant = placer.try_claim(req("run0"))
    assert isinstance(grant, Grant)
    drivers = Drivers(placer, ["run0", "idle"])
    placer.release(grant)
    assert drivers.take() == []


def listening(*runs: str) -> tuple[Wakeups, Callable[..., list[str]]]:
    """Wakeups with a listener per run, and a function that fires a change and says who was woken."""
    wakeups = Wakeups()
    woken: list[str] = []
    for run_id in runs:
        wakeups.add(lambda run_id=run_id: woken.append(run_id), run_id=run_id)

    def change(turn: bool = False, named: frozenset[str] | None = None) -> list[str]:
        woken.clear()
        for listener in wakeups.on_change(turn=turn, named=named):
            listener()
        return sorted(woken)

    return wakeups, change


def test_wakeups_keep_a_call_s_first_place_when_it_is_refused_again():
    kind = Kind(Resources(cpus=1), (None,))
    wakeups, change = listening("a", "b")
    wakeups.waits("a.1", "a", kind, "0001")
    wakeups.waits("b.1", "b", kind, "0002")
    wakeups.waits("a.1", "a", kind, "0003")  # refused again later: still first
    assert change() == ["a"]


def test_wakeups_wake_every_call_whose_kind_was_not_known():
    wakeups, change = listening("a", "b")
    wakeups.waits("a.1", "a", None, "")
    wakeups.waits("b.1", "b", None, "")
    assert change() == ["a", "b"]


def test_a_turn_wakes_only_a_first_that_was_refused_behind_another_call():
    wakeups, change = listening("behind", "starved")
    wakeups.waits("behind.1", "behind", Kind(Resources(cpus=1), (None,)), "0001", behind=True)
    wakeups.waits("starved.1", "starved", Kind(Resources(cpus=2), (None,)), "0002")  # no machine has 2 cpus free
    assert change(turn=True) == ["behind"]  # a turn frees nothing: the one refused for want of cpus still wants them
    assert change() == ["behind", "starved"]  # a give-back may have freed them


def test_a_call_granted_in_its_turn_wakes_those_refused_behind_it_and_not_those_short_of_machines():
    placer = Placer(clock=Clock())
    placer.attach(machine("box", cpus=4, gpus=(0,)))
    gpu_held = placer.try_claim(req("gpu_holder", gpus=1))
    cpus_held = placer.try_claim(req("cpu_holder", cpus=3))
    assert isinstance(gpu_held, Grant) and isinstance(cpus_held, Grant)
    for run_id, ask in (("gpu_wait", {"gpus": 1}), ("big", {"cpus": 3}), ("small", {})):
        assert isinstance(placer.try_claim(req(run_id, **ask)), Waiting)
    drivers = Drivers(placer, ["gpu_wait", "big", "small"])
    placer.release(cpus_held)
    assert sorted(drivers.take()) == ["big", "gpu_wait", "small"]  # the first of each kind
    small = placer.try_claim(req("small"))
    assert isinstance(small, Waiting) and small.reason.startswith("waiting for its turn")  # big is ahead
    assert isinstance(placer.try_claim(req("gpu_wait", gpus=1)), Waiting)  # the GPU is still held
    assert drivers.take() == []
    assert isinstance(placer.try_claim(req("big", cpus=3)), Grant)
    assert drivers.take() == ["small"]  # its turn came; the GPU call still wants its GPU: not woken


def test_a_change_naming_calls_wakes_those_waiting_here_and_no_other_first():
    # Two processes each hold a first of the kind; the books name the installation's first (b's) alone.
    cpu, gpu = Kind(Resources(cpus=1), (None,)), Kind(Resources(cpus=1, gpus=1), (None,))
    wakeups, change = listening("a", "b", "g", "unknown")
    wakeups.waits("a.1", "a", cpu, "0002")
    wakeups.waits("b.1", "b", cpu, "0003")
    wakeups.waits("g.1", "g", gpu, "0001")
    wakeups.waits("unknown.1", "unknown", None, "")
    assert change(named=frozenset({"b.1", "elsewhere.1"})) == ["b", "unknown"]
    assert change(named=frozenset()) == ["unknown"]  # nobody waits in the installation's order
    assert change() == ["a", "g", "unknown"]  # books that name nobody: the first of each kind here


def test_a_turn_naming_calls_wakes_only_those_refused_behind():
    cpu = Kind(Resources(cpus=1), (None,))
    wakeups, change = listening("behind", "starved")
    wakeups.waits("behind.1", "behind", cpu, "0001", behind=True)
    wakeups.waits("starved.1", "starved", Kind(Resources(cpus=2), (None,)), "0002")
    assert change(turn=True, named=frozenset({"behind.1", "starved.1"})) == ["behind"]


def test_a_grant_wakes_nobody_itself_when_the_books_name_the_next_call():
    cpu = Kind(Resources(cpus=1), (None,))
    wakeups, _change = listening("a", "b")
    wakeups.waits("a.1", "a", cpu, "0001")
    wakeups.waits("b.1", "b", cpu, "0002")
    assert wakeups.granted("a.1", wake_next=False) == []
    assert len(wakeups.granted("b.1")) == 0  # the last one: nobody is next
