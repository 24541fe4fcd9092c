"""The fault soak (issue #38, item 3): sweeps of runs with a mapped node, and while their elements run, worker
kills (kill -9), driver kills, Redis restarts (its data kept, or lost) and PostgreSQL restarts, one after another
(support/soak.py says how each is struck). At the end every run is ``ok`` with the right result, each element
has exactly one ``ok`` row (the others are failures a fault explains, with distinct attempts) and every grant
is given back.

Small (a few faults, every kind once) in the default run; ``TEST_FLUKSIO_SOAK=full`` runs the full size, as
the README says (``TEST_FLUKSIO_SOAK_SEED`` picks another plan).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fluksio import RunStatus
from tests.conftest import Compass
from tests.integration.support.cluster import FAULT_TIMINGS, Cluster, running_cluster
from tests.integration.support.servers import PostgresServer, wait_for
from tests.integration.support.soak import Figures, Soak, chosen, duplicated, failed_attempts, plan, unexplained_rows

pytestmark = [pytest.mark.integration, pytest.mark.soak]


@pytest.fixture
def cluster(tmp_path: Path, postgres: PostgresServer) -> Iterator[Cluster]:
    with running_cluster(tmp_path, {}, postgres.new_database(), env=FAULT_TIMINGS) as setup:
        yield setup  # its workers are the soak's to start (support/soak.py)


def test_runs_survive_a_soak_of_faults(cluster: Cluster, postgres: PostgresServer, compass: Compass) -> None:
    try:
        name, size, seed = chosen()
    except ValueError as error:
        pytest.fail(str(error), pytrace=False)
    rng = random.Random(seed)
    figures = Figures(seed=seed, size=name)
    soak = Soak(cluster, postgres, rng, figures)
    started = time.monotonic()
    try:
        soak.start()
        with cluster.client() as client:
            for fault in plan(rng, size):
                since = soak.calls_started()
                soak.submit_sweep(client, size)
                soak.wait_running(client, since)
                soak.strike(client, fault)
            # Bounded: every fault is over, what is left is the last sweeps' elements, a stale lease and a resume.
            records = soak.ended(client, timeout=60 + 5 * size.faults)
            figures.wall_s = time.monotonic() - started
            figures.runs = len(records)
            figures.elements = sum(len(run.items) for run in soak.runs)
            figures.calls = soak.calls_started()
            figures.failed_attempts = sum(failed_attempts(record) for record in records)
            print(figures.line())
            print(f"faults struck: {soak.timeline()}")
            soak.keep(records)
            not_ok = [f"{r.id}: {r.status.value} {r.status_reason}" for r in records if r.status is not RunStatus.OK]
            wrong_results = [f"{r.id}: {r.result} (expected {run.expected()})"
                             for run, r in zip(soak.runs, records, strict=True)
                             if r.status is RunStatus.OK and r.result != run.expected()]
            wrong_rows = [f"{r.id} {problem}" for run, r in zip(soak.runs, records, strict=True)
                          for problem in unexplained_rows(run, r)]
            compass.add("runs lost", len(not_ok))
            compass.add("rows duplicated", sum(duplicated(r) for r in records))
            assert not not_ok, not_ok
            assert not wrong_results, wrong_results
            assert not wrong_rows, wrong_rows

            def all_given_back() -> bool:
                placement = client.placement()
                return not placement["waiting"] and all(not m["calls"] and not m["grants"]
                                                        for m in placement["machines"])

            try:
                wait_for(all_given_back, 30, "every grant given back and nothing waiting")
            except AssertionError as error:
                error.add_note(f"the placer's books: {client.placement()}")
                raise
    except BaseException as error:
        error.add_note(f"soak seed {seed}, size {name}, {len(soak.runs)} runs submitted; faults struck: "
                       f"{soak.timeline()}; workers' logs in {cluster.workdir}; rerun with "
                       f"TEST_FLUKSIO_SOAK_SEED={seed}{' TEST_FLUKSIO_SOAK=' + name if name != 'small' else ''}")
        raise
    compass.add("faults survived", sum(figures.faults.values()))
