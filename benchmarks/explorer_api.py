"""The run explorer's API: server time per request on a store of 10,000 runs and a series of 100,000 points.

    .venv/bin/python benchmarks/explorer_api.py [--runs 10000] [--points 100000] [--repeat 30]

Fills a SQLite run store directly (``--runs`` finished runs, each with two metrics of five steps and a
node row, and one run whose ``loss`` has ``--points`` steps), starts ``fluksio ui`` on it as a user would,
and asks it, one request at a time, for:

* ``GET /api/runs`` — the first page (50 runs, newest first, with each one's newest metric values and
  the total count);
* ``GET /api/runs/<id>/metrics`` — the long series, downsampled to the default 2,000 points;
* the two pages built on them (``/`` and the long run's ``/runs/<id>``, whose chart draws 600 points).

The figure is the server's own time per request (its ``Server-Timing`` header: from the handler's start
to its answer, the store read included); the note gives the round trip seen by the client on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import harness  # noqa: E402
from benchmarks.harness import Figure  # noqa: E402

#: Metrics each filler run has, and steps of each.
FILLER_METRICS, FILLER_STEPS = ("loss", "accuracy"), 5
#: Rows per insert statement while filling the store.
BATCH = 5_000


def fill(database_url: str, runs: int, points: int) -> str:
    """The store: ``runs`` finished runs and one with a ``points``-step series; returns that run's id."""
    from sqlalchemy import insert

    from fluksio.clock import utcnow
    from fluksio.store.db import Database
    from fluksio.store.ids import new_run_id
    from fluksio.store.metrics import upsert_metrics
    from fluksio.store.models import Run, RunNode

    db = Database(database_url)
    db.upgrade()
    now = utcnow()
    ids = [new_run_id() for _ in range(runs)]
    rows = [{"id": run_id, "flow": "train", "params": {"lr": 0.001 * (i % 10), "seed": i}, "params_digest": "p",
             "seed": i, "group_id": f"g{i // 100}", "status": "ok", "created_at": now, "started_at": now,
             "finished_at": now, "duration_ms": 1000 + i % 500, "engine": "embedded"} for i, run_id in enumerate(ids)]
    nodes = [{"run_id": run_id, "node": "fit", "element": -1, "attempt": 1, "status": "ok", "machine": "box",
              "gpus": [], "started_at": now, "finished_at": now, "duration_ms": 900} for run_id in ids]
    with db.write_connection() as connection:
        for start in range(0, runs, BATCH):
            connection.execute(insert(Run), rows[start:start + BATCH])
            connection.execute(insert(RunNode), nodes[start:start + BATCH])
    metrics = [(run_id, name, step, 1.0 / (step + 1) + i * 1e-6) for i, run_id in enumerate(ids)
               for name in FILLER_METRICS for step in range(FILLER_STEPS)]
    for start in range(0, len(metrics), BATCH):
        upsert_metrics(db, metrics[start:start + BATCH])
    long_id = new_run_id()
    with db.write_connection() as connection:
        connection.execute(insert(Run), [{**rows[0], "id": long_id, "group_id": None, "flow": "long"}])
    series = [(long_id, "loss", step, 1.0 / (1 + step * 1e-3) + (step % 97) * 1e-4) for step in range(points)]
    for start in range(0, points, BATCH):
        upsert_metrics(db, series[start:start + BATCH])
    db.dispose()
    return long_id


def timed(url: str) -> tuple[float, float, bytes]:
    """(server ms from ``Server-Timing``, round-trip ms, body) of one GET."""
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as response:
        body = response.read()
        timing = response.headers["Server-Timing"]
    round_trip = (time.perf_counter() - started) * 1000
    return float(timing.split("dur=")[1]), round_trip, body


def measure(runs: int, points: int, repeat: int, budget_s: float) -> list[Figure]:
    with tempfile.TemporaryDirectory(prefix="fluksio-bench-explorer-") as workdir:
        root = Path(workdir)
        database_url = f"sqlite:///{root / 'fluksio.db'}"
        harness.progress(f"filling the store: {runs:,} runs, one series of {points:,} points")
        long_id = fill(database_url, runs, points)
        processes = harness.Processes(root)
        port = harness.free_port()
        env = harness.child_env(FLUKSIO_DATABASE_URL=database_url, FLUKSIO_ARTIFACTS_DIR=str(root / "artifacts"),
                                FLUKSIO_CONFIG=str(root / "no-such.toml"), FLUKSIO_CPUS="2")
        try:
            processes.start("ui", [sys.executable, "-m", "fluksio.cli.main", "ui", "--port", str(port)], env=env,
                            cwd=root)
            base = f"http://127.0.0.1:{port}"

            def answers() -> bool:
                processes.check_alive("ui")
                try:
                    return timed(base + "/api/machines")[0] >= 0
                except OSError:
                    return False

            harness.wait_until(answers, 60, "fluksio ui answering")
            page = json.loads(timed(base + "/api/runs")[2])
            if page["total"] != runs + 1 or len(page["runs"]) != 50:
                raise RuntimeError(f"the runs API listed {len(page['runs'])} of {page['total']} runs")
            series = json.loads(timed(f"{base}/api/runs/{long_id}/metrics")[2])
            if series["sizes"] != {"loss": points} or len(series["series"]["loss"]) > 2000:
                raise RuntimeError(f"the metrics API answered {series['sizes']} with "
                                   f"{len(series['series']['loss'])} points")
            requests = {
                "runs": (base + "/api/runs", f"GET /api/runs: first page of 50, {runs + 1:,} runs in the store"),
                "metrics": (f"{base}/api/runs/{long_id}/metrics",
                            f"GET /api/runs/<id>/metrics: one series of {points:,} points, to 2,000"),
                "runs page": (base + "/", f"runs page (HTML), first page of 50 of {runs + 1:,}"),
                "run page": (f"{base}/runs/{long_id}", f"run page (HTML) with a {points:,}-point chart"),
            }
            figures = []
            deadline = time.monotonic() + budget_s
            for key, (url, label) in requests.items():
                server, trip = [], []
                for _ in range(repeat):
                    s, r, _body = timed(url)
                    server.append(s)
                    trip.append(r)
                    if time.monotonic() > deadline:
                        break
                harness.progress(f"{key}: server median {harness.median(server):.1f} ms over {len(server)} requests")
                figures.append(Figure("explorer API (SQLite)", label, "ms", harness.median(server), samples=server,
                                      note=f"server time (Server-Timing); round trip {harness.median(trip):.1f} ms"))
            return figures
        finally:
            processes.stop_all()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10_000, help="finished runs in the store (default 10,000)")
    parser.add_argument("--points", type=int, default=100_000, help="points of the long series (default 100,000)")
    harness.add_common_arguments(parser, repeat=30)
    args = parser.parse_args()
    harness.isolate()
    if args.smoke:
        args.runs, args.points, args.repeat = 500, 5_000, 3
    harness.emit_figures(measure(args.runs, args.points, args.repeat, args.budget_s), args.json)


if __name__ == "__main__":
    main()
