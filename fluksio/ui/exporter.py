"""The installation in Prometheus: machines, waiting calls, pools, runs and call durations, read at scrape time.

Served at ``/metrics`` by the explorer (``ui/scrape.py``) and by ``fluksio metrics-server``. Needs
``prometheus-client`` (``pip install 'fluksio[metrics]'``), imported by whoever serves this module.

A custom collector, not gauges set as things happen: the truth lives in the placer's books and the run
store, which every process of the installation writes, so each scrape reads them (``client.placement()``,
``client.tallies``) and writes what it found. Only the histogram of call durations keeps state, in this
process (``ui/durations.py`` says how and why).

Labels stay few, whatever the installation runs: machines, device labels, pools, statuses, and flow and node
names, which come from code — never a run or call id, never a parameter, never free text (why a call waits
is one word of ``placement/reasons.WaitKind``).

A source that fails, or does not answer within :data:`READ_TIMEOUT_S` (the store or Redis in an outage,
which their clients wait through for up to a minute), never fails the scrape: it answers in time, with
``fluksio_up 0`` and without the metrics of that source. Prometheus's own ``up`` then still says the exporter
answered, and ``fluksio_up == 0`` is what to alert on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Generic, TypeVar

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from fluksio.client import Client
from fluksio.constants import DEFAULT_LABEL
from fluksio.errors import first_line
from fluksio.placement.reasons import WaitKind, calls_listed, wait_kind
from fluksio.schemas import RunStatus
from fluksio.ui.durations import CallDurations

log = logging.getLogger(__name__)
T = TypeVar("T")

#: How long a scrape waits for its sources (read at once), in seconds: within Prometheus's default timeout (10 s).
READ_TIMEOUT_S = 5.0


class BoundedRead(Generic[T]):
    """A read of one source, on a thread of its own, waited for until a scrape's deadline.

    A read still going when the next scrape comes (a store that hangs) is waited for again, not started a
    second time: an outage ties up one thread per source, not one per scrape. Threads are daemons, so a hung
    read never holds up the process's exit. A failure is logged once when it begins and once when it ends,
    not at every scrape.
    """

    def __init__(self, read: Callable[[], T], what: str) -> None:
        self._read = read
        self.what = what
        self._pending: Future[T] | None = None
        self._lock = threading.Lock()
        self._failing = False

    def start(self) -> Future[T]:
        with self._lock:
            if self._pending is None or self._pending.done():
                self._pending = Future()
                threading.Thread(target=self._run, args=(self._pending,), daemon=True,
                                 name=f"fluksio-metrics: {self.what}").start()
            return self._pending

    def _run(self, future: Future[T]) -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(self._read())
        except BaseException as exc:  # handed to the scrape waiting for it, which says so
            future.set_exception(exc)

    def result(self, future: Future[T], deadline: float) -> T | None:
        """What the read gave, or ``None`` (logged) when it failed or had not answered by ``deadline``
        (``time.monotonic()``)."""
        try:
            value = future.result(max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            self._failed("no answer before the scrape's deadline")
            return None
        except Exception as exc:  # any failure of a source is a fluksio_up 0, never a failed scrape
            log.debug("reading %s for /metrics failed", self.what, exc_info=exc)
            self._failed(first_line(str(exc), type(exc).__name__))
            return None
        if self._failing:
            self._failing = False
            log.info("metrics: %s answers again", self.what)
        return value

    def _failed(self, why: str) -> None:
        if not self._failing:
            self._failing = True
            log.warning("metrics: cannot read %s (%s); exporting fluksio_up 0 until it answers", self.what, why)


class InstallationCollector(Collector):
    """Every fluksio metric of one installation, read through ``client`` at each scrape."""

    def __init__(self, client: Client, timeout_s: float = READ_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self.durations = CallDurations(client.tallies)
        self._placement = BoundedRead(client.placement, "the placer's books")
        self._runs = BoundedRead(client.tallies.runs_by_status, "the run store")
        self._calls = BoundedRead(self.durations.update, "the run store's node rows")
        # Place the cursor now, in the background: calls that end before the first scrape are counted too.
        self._calls.start()

    def collect(self) -> Iterator[Metric]:
        # All three at once, then each waited for until one deadline: a scrape takes as long as the slowest
        # read, and never longer than the timeout.
        deadline = time.monotonic() + self.timeout_s
        placement, runs, calls = self._placement.start(), self._runs.start(), self._calls.start()
        snapshot = self._placement.result(placement, deadline)
        by_status = self._runs.result(runs, deadline)
        counted = self._calls.result(calls, deadline) is not None
        if snapshot is not None:
            yield from machine_metrics(snapshot)
            yield from waiting_metrics(snapshot)
            yield from pool_metrics(snapshot)
        if by_status is not None:
            yield run_metrics(by_status)
        yield duration_metrics(self.durations)
        yield GaugeMetricFamily(
            "fluksio_up", "1 when this scrape read the placer's books and the run store; 0 when one failed or did "
            f"not answer within {self.timeout_s:g} s (its metrics are then left out)",
            value=float(snapshot is not None and by_status is not None and counted))


def registry_of(client: Client, timeout_s: float = READ_TIMEOUT_S) -> CollectorRegistry:
    """A registry holding only the installation's metrics (not this process's own: Python's garbage
    collector and the like say nothing about the installation)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(InstallationCollector(client, timeout_s))
    return registry


# -- one family per question --------------------------------------------------------------------------


def machine_metrics(snapshot: dict[str, Any]) -> Iterator[Metric]:
    """Each machine's cpus, GPUs and RAM, total and free, and the calls running on it."""
    machines = snapshot["machines"]
    for resource, name, unit in (("cpus", "cpus", "CPUs"), ("gpus", "gpus", "GPUs"), ("ram_mb", "ram_mb", "RAM, MB")):
        for state, key in (("total", "total"), ("free", "free")):
            family = GaugeMetricFamily(f"fluksio_machine_{name}_{state}",
                                       f"{unit} of each attached machine, {state} (what its books hold, not the OS)",
                                       labels=["machine"])
            for machine in machines:
                family.add_metric([machine["name"]], float(machine[key][resource]))
            yield family
    running = GaugeMetricFamily("fluksio_calls_running", "Node calls holding a grant on each machine",
                                labels=["machine"])
    for machine in machines:
        running.add_metric([machine["name"]], float(machine["calls"]))
    yield running


def waiting_metrics(snapshot: dict[str, Any]) -> Iterator[Metric]:
    """Calls waiting for a place, by the device label they ask for and why, and how long the oldest has waited.

    Counted from the placer's list of who waits: a mapped node's waiting elements are one entry there, counted
    as the elements they are. Every label a machine carries (and ``default``, no label) is written with each
    reason, 0 when nothing waits, so that a sum over them is 0, not "no data".
    """
    counts = {(label, kind.value): 0 for label in _labels(snapshot) for kind in WaitKind}
    oldest = 0.0
    for entry in snapshot["waiting"]:
        key = (entry.get("label") or DEFAULT_LABEL, wait_kind(entry["reason"]).value)
        counts[key] = counts.get(key, 0) + calls_listed(entry["reason"])
        oldest = max(oldest, float(entry["waiting_s"]))
    waiting = GaugeMetricFamily(
        "fluksio_calls_waiting", "Node calls waiting for a place, by the device label they ask for (default: none) "
        "and why: no_machine, resources, pool, turn or other", labels=["label", "reason"])
    for (label, reason), count in sorted(counts.items()):
        waiting.add_metric([label, reason], float(count))
    yield waiting
    yield GaugeMetricFamily("fluksio_oldest_waiting_call_age_seconds",
                            "How long the call waiting longest has waited, in seconds (0: none waits)", value=oldest)


def _labels(snapshot: dict[str, Any]) -> set[str]:
    return {DEFAULT_LABEL, *(label for machine in snapshot["machines"] for label in machine["labels"])}


def pool_metrics(snapshot: dict[str, Any]) -> Iterator[Metric]:
    """Each pool's slots, held and in all."""
    used = GaugeMetricFamily("fluksio_pool_slots_used", "Slots of each pool held by running calls", labels=["pool"])
    slots = GaugeMetricFamily("fluksio_pool_slots_total", "Slots of each pool, in all", labels=["pool"])
    for pool in snapshot["pools"]:
        used.add_metric([pool["name"]], float(pool["in_use"]))
        slots.add_metric([pool["name"]], float(pool["slots"]))
    yield used
    yield slots


def run_metrics(by_status: dict[str, int]) -> Metric:
    """How many runs the store holds in each status (every status written, 0 when it holds none)."""
    family = GaugeMetricFamily("fluksio_runs", "Runs in the run store, by status", labels=["status"])
    for status in [*RunStatus, *sorted(set(by_status) - {s.value for s in RunStatus})]:
        family.add_metric([str(status)], float(by_status.get(str(status), 0)))
    return family


def duration_metrics(durations: CallDurations) -> Metric:
    family = HistogramMetricFamily(
        "fluksio_call_duration_seconds", "How long node calls that ran took, by flow and node (counted from when "
        "this exporter started; cached and skipped nodes are not calls)", labels=["flow", "node"])
    for (flow, node), (buckets, total) in durations.histograms().items():
        family.add_metric([flow, node], buckets, total)
    return family
