"""A fault soak: sweeps of runs with a mapped node, and real faults struck while their elements run.

Every choice — the faults' order, how long each part stays down, each sweep's elements and pauses, which
machine dies — comes from one ``random.Random(seed)``, so a failing seed shows the same plan again (the
moments the faults strike still depend on the machine's speed). The soak's size and seed come from
``TEST_FLUKSIO_SOAK`` (``small``, the default, or ``full``) and ``TEST_FLUKSIO_SOAK_SEED``.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from fluksio import Client
from fluksio.client import RunHandle
from fluksio.schemas import NodeRecord, NodeStatus, RunRecord
from tests.integration.support import cluster_flows as flows
from tests.integration.support.cluster import Cluster
from tests.integration.support.servers import PostgresServer, wait_for

WORKER_KILLED = "worker killed"
DRIVER_KILLED = "driver killed"
#: Redis restarted as one with persistence restarts: what it held is back (queues, books, inboxes).
REDIS_RESTARTED = "Redis restarted"
#: Redis restarted with its data lost (no persistence): queued calls, the books and the inboxes are gone.
REDIS_EMPTIED = "Redis restarted empty"
POSTGRES_RESTARTED = "PostgreSQL restarted"
KINDS = (WORKER_KILLED, DRIVER_KILLED, REDIS_RESTARTED, REDIS_EMPTIED, POSTGRES_RESTARTED)

#: How long each kind of fault keeps its part down before it is started again, in seconds (drawn between).
HOLD_S = {WORKER_KILLED: (0.0, 2.0), DRIVER_KILLED: (0.0, 2.0), REDIS_RESTARTED: (0.5, 3.0),
          REDIS_EMPTIED: (0.5, 3.0), POSTGRES_RESTARTED: (0.5, 4.0)}

#: The node workers (each with two cpus): the machines a worker kill strikes.
NODE_WORKERS = ("soak-node-1", "soak-node-2")
NODE_FLAGS = ("--cpus", "2", "--gpus", "none")

#: What a failed attempt of an element may say: each is a fault the soak struck, and nothing else.
EXPLAINED = ("was lost while running the call",                     # its worker was killed
             "its completion was lost on the way to the driver")    # its worker died as it reported

#: The seed a soak uses unless ``TEST_FLUKSIO_SOAK_SEED`` says otherwise.
DEFAULT_SEED = 3817


@dataclass(frozen=True)
class Size:
    #: Faults struck, each while a fresh sweep's elements run.
    faults: int
    #: Runs in the sweep submitted before each fault.
    runs_per_sweep: int
    #: Elements of each run's mapped node (drawn between, per sweep).
    elements: tuple[int, int]
    #: Seconds each element takes (drawn between, per sweep).
    pause_s: tuple[float, float]


SIZES = {"small": Size(faults=len(KINDS), runs_per_sweep=2, elements=(3, 5), pause_s=(0.4, 0.8)),
         "full": Size(faults=7 * len(KINDS), runs_per_sweep=3, elements=(4, 8), pause_s=(0.3, 1.0))}


def chosen() -> tuple[str, Size, int]:
    """The size's name, the size and the seed the environment asks for; ValueError saying what is wrong."""
    name = os.environ.get("TEST_FLUKSIO_SOAK", "small")
    if name not in SIZES:
        raise ValueError(f"TEST_FLUKSIO_SOAK={name!r} is not a soak size (use one of: {', '.join(SIZES)})")
    seed = os.environ.get("TEST_FLUKSIO_SOAK_SEED", str(DEFAULT_SEED))
    if not seed.isdigit():
        raise ValueError(f"TEST_FLUKSIO_SOAK_SEED={seed!r} is not a whole number (e.g. {DEFAULT_SEED})")
    return name, SIZES[name], int(seed)


@dataclass(frozen=True)
class Fault:
    kind: str
    #: Seconds its part stays down.
    hold_s: float


def plan(rng: random.Random, size: Size) -> list[Fault]:
    """``size.faults`` faults, every kind about as often (each at least once when there are enough), shuffled."""
    kinds = [KINDS[i % len(KINDS)] for i in range(size.faults)]
    rng.shuffle(kinds)
    return [Fault(kind, round(rng.uniform(*HOLD_S[kind]), 2)) for kind in kinds]


@dataclass(frozen=True)
class SoakRun:
    handle: RunHandle
    factor: int
    items: list[int]

    def expected(self) -> dict[str, Any]:
        scaled = [item * self.factor for item in self.items]
        return {"scaled": scaled, "total": sum(scaled)}


@dataclass
class Figures:
    """What a soak did: its faults by kind, its runs, the element calls started and how many of them ran again."""

    seed: int
    size: str
    faults: Counter[str] = field(default_factory=Counter)
    runs: int = 0
    elements: int = 0
    calls: int = 0
    failed_attempts: int = 0
    wall_s: float = 0.0

    @property
    def rerun(self) -> int:
        return self.calls - self.elements

    def line(self) -> str:
        faults = ", ".join(f"{self.faults[kind]} {kind}" for kind in KINDS)
        return (f"soak {self.size}, seed {self.seed}: faults {sum(self.faults.values())} ({faults}); "
                f"runs {self.runs}; element calls {self.calls} for {self.elements} elements, {self.rerun} run again "
                f"({self.failed_attempts} failed attempts recorded); wall {self.wall_s:.0f} s")


class Soak:
    """Strikes faults at a :class:`Cluster` (Redis, PostgreSQL, :data:`NODE_WORKERS`, one driver worker) while
    the sweeps it submits run."""

    def __init__(self, cluster: Cluster, postgres: PostgresServer, rng: random.Random, figures: Figures) -> None:
        self.cluster = cluster
        self.postgres = postgres
        self.rng = rng
        self.figures = figures
        self.tag = "soak"
        self.runs: list[SoakRun] = []
        self.drivers = 0
        self.driver = ""
        #: Each fault struck: its kind, when it struck and when its part was started again (epoch seconds).
        self.struck: list[tuple[str, float, float]] = []

    def start(self) -> None:
        # Drivers resume the runs whose driver died by themselves, as a service restarting a worker expects.
        self.cluster.env["FLUKSIO_AUTO_RESUME"] = "true"
        for name in NODE_WORKERS:
            self.start_worker(name, "nodes", *NODE_FLAGS)
        self.start_driver()

    def start_driver(self) -> None:
        self.drivers += 1
        self.driver = f"soak-driver-{self.drivers}"
        self.start_worker(self.driver, "drivers", "--drivers-only")

    def start_worker(self, name: str, role: str, *flags: str) -> None:
        """Start worker ``name`` (again) and wait until it is ready, as a service manager restarting it would:
        a worker that cannot reach the broker or the run store at its start exits, and the next fault must not
        strike before it is up."""
        ready = f"{role}@{name} ready."
        before = self.cluster.whole_log(name).count(ready) if (self.cluster.workdir / f"worker-{name}.log").exists() \
            else 0
        process = self.cluster.start_worker(name, *flags)

        def up() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"worker {name} exited at its start: {self.cluster.log_of(name)[-1500:]}")
            return self.cluster.whole_log(name).count(ready) > before

        wait_for(up, 60, f"worker {name} ready")

    def calls_started(self) -> int:
        """Element calls started so far (each start leaves a mark)."""
        return sum(1 for _ in self.cluster.marks.glob(f"{self.tag}.*"))

    def submit_sweep(self, client: Client, size: Size) -> None:
        items = list(range(self.rng.randint(*size.elements)))
        pause = round(self.rng.uniform(*size.pause_s), 2)
        factors = [len(self.runs) + k + 1 for k in range(size.runs_per_sweep)]  # each run's own
        sweep = client.sweep(flows.soak_map, {"factor": factors}, params={"tag": self.tag, "items": items,
                                                                            "pause": pause})
        self.runs += [SoakRun(handle, factor, items) for handle, factor in zip(sweep.runs, factors, strict=True)]

    def busy_machines(self, client: Client) -> list[str]:
        return sorted(m["name"] for m in client.placement()["machines"] if m["calls"] and m["name"] in NODE_WORKERS)

    def wait_running(self, client: Client, since: int) -> None:
        """Until an element has started since ``since`` calls and a node worker holds a call: the moment to strike."""
        wait_for(lambda: self.calls_started() > since and self.busy_machines(client), 60,
                 f"elements running again (after {since} element calls)")

    def strike(self, client: Client, fault: Fault) -> None:
        """The fault, held for its time, then the part started again."""
        cluster = self.cluster
        stamp = time.time()
        if fault.kind == WORKER_KILLED:
            busy = self.busy_machines(client) or list(NODE_WORKERS)
            victim = self.rng.choice(busy)
            cluster.kill(victim)
            time.sleep(fault.hold_s)  # the machine stays dead a while: its heartbeat may expire meanwhile
            self.start_worker(victim, "nodes", *NODE_FLAGS)
        elif fault.kind == DRIVER_KILLED:
            cluster.kill(self.driver)
            time.sleep(fault.hold_s)  # no driver alive meanwhile
            self.start_driver()
        elif fault.kind in (REDIS_RESTARTED, REDIS_EMPTIED):
            cluster.redis.stop(keep_data=fault.kind == REDIS_RESTARTED)
            time.sleep(fault.hold_s)  # the broker, the books and the inboxes are down meanwhile
            cluster.redis.start()
        else:
            self.postgres.pause()
            time.sleep(fault.hold_s)  # the run store is down meanwhile
            self.postgres.resume()
        self.figures.faults[fault.kind] += 1
        self.struck.append((fault.kind, stamp, time.time()))

    def timeline(self) -> str:
        """The faults struck so far, with when each struck and when its part was back (local clock, as the
        workers' logs have it)."""
        def clock(at: float) -> str:
            return time.strftime("%H:%M:%S", time.localtime(at)) + f".{int(at % 1 * 100):02d}"

        return "; ".join(f"{kind} {clock(struck)}-{clock(back)}" for kind, struck, back in self.struck) or "none"

    def keep(self, records: list[RunRecord]) -> None:
        """Write what the soak did beside the workers' logs (``soak.json``), to read when it fails."""
        kept = {"faults": [{"kind": kind, "struck": struck, "back": back} for kind, struck, back in self.struck],
                "runs": [{"factor": run.factor, "record": record.model_dump(mode="json")}
                         for run, record in zip(self.runs, records, strict=True)]}
        (self.cluster.workdir / "soak.json").write_text(json.dumps(kept, indent=1))

    def ended(self, client: Client, timeout: float) -> list[RunRecord]:
        """Every run's record once all have ended; failing after ``timeout`` s, saying what the placer holds."""
        deadline = time.monotonic() + timeout
        try:
            return [run.handle.wait(timeout=max(1.0, deadline - time.monotonic())) for run in self.runs]
        except TimeoutError as error:
            placement = client.placement()
            held = {m["name"]: [g["id"] for g in m["grants"]] for m in placement["machines"]}
            error.add_note(f"grants held: {held}; waiting: {placement['waiting']}")
            raise


def units_of(record: RunRecord) -> dict[tuple[str, int | None], list[NodeRecord]]:
    """A run's rows by unit: ``(node, element)`` (``None`` for a node that is not mapped)."""
    units: dict[tuple[str, int | None], list[NodeRecord]] = {}
    for row in record.nodes:
        units.setdefault((row.node, row.index), []).append(row)
    return units


def duplicated(record: RunRecord) -> int:
    """The units of a run with more than one ``ok`` row: outputs recorded twice."""
    return sum(sum(row.status is NodeStatus.OK for row in rows) > 1 for rows in units_of(record).values())


def unexplained_rows(run: SoakRun, record: RunRecord) -> list[str]:
    """What is wrong with a run's rows: a unit (an element, the sum) without exactly one ``ok`` row, an attempt
    number used twice, a failed attempt that no fault the soak strikes explains, or a row of no unit of the run."""
    units = units_of(record)
    expected = {("scale_element", item) for item in run.items} | {("add_up", None)}
    wrong = [f"{node}[{index}]: no row" for node, index in sorted(expected - set(units), key=str)]
    wrong += [f"{node}[{index}]: a row of no unit of the run" for node, index in sorted(set(units) - expected, key=str)]
    for (node, index), rows in sorted(units.items(), key=str):
        unit = node if index is None else f"{node}[{index}]"
        oks = sum(row.status is NodeStatus.OK for row in rows)
        if oks != 1:
            wrong.append(f"{unit}: {oks} ok rows")
        attempts = [row.attempt for row in rows]
        if len(set(attempts)) != len(attempts):
            wrong.append(f"{unit}: attempts {sorted(attempts)}")
        wrong += [f"{unit} attempt {row.attempt}: {row.status.value}: {row.error}" for row in rows
                  if row.status is not NodeStatus.OK
                  and not (row.status is NodeStatus.ERROR and any(text in (row.error or "") for text in EXPLAINED))]
    return wrong


def failed_attempts(record: RunRecord) -> int:
    return sum(row.status is not NodeStatus.OK for row in record.nodes)
