"""Metrics: emissions per second from one node into the run store's metric table.

    .venv/bin/python benchmarks/emissions.py [--count 100000] [--repeat 3]

One embedded run of ``bench_emit``: a single node calls ``emit("loss", value)`` ``--count`` times.
Emissions per second = count / the node's duration (from its start to the end of the last batch
write, which the call does before it reports). Statements = the SQL statements that touched
``run_metrics``, counted on the store's write engine. The run's series is read back to check that
every emission landed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import harness  # noqa: E402
from benchmarks.harness import Figure  # noqa: E402

#: The issue's floor, in emissions per second into SQLite.
TARGET_PER_S = 50_000.0


def measure(count: int, repeat: int) -> list[Figure]:
    from sqlalchemy import event

    from benchmarks.bench_flows import emitter
    from fluksio import Settings, connect

    rates, loop_rates, statements = [], [], []
    with tempfile.TemporaryDirectory(prefix="fluksio-bench-") as workdir:
        settings = Settings(broker_url="memory://", database_url=f"sqlite:///{workdir}/fluksio.db",
                            artifacts_dir=Path(workdir) / "artifacts", cpus=2)
        with connect(settings) as client:
            counted = {"n": 0}

            def count_statement(_conn, _cursor, statement: str, *_args) -> None:  # type: ignore[no-untyped-def]
                if "run_metrics" in statement:
                    counted["n"] += 1

            event.listen(client._runtime.db.write_engine, "before_cursor_execute", count_statement)
            client.submit(emitter, {"count": min(count, 1000)}, no_cache=True).wait(timeout=60)  # warm-up
            for _ in range(repeat):
                counted["n"] = 0
                record = client.submit(emitter, {"count": count}, no_cache=True).wait(timeout=harness.RUN_TIMEOUT_S)
                if record.status.value != "ok":
                    raise RuntimeError(f"bench_emit ended {record.status.value}: {record.status_reason}")
                node = record.nodes[0]
                seconds = (node.finished_at - node.started_at).total_seconds()
                rates.append(count / seconds)
                loop_rates.append(count / record.result["done"])
                statements.append(counted["n"])
                landed = len(client.metrics(record.id).get("loss", []))
                if landed != count:
                    raise RuntimeError(f"{landed} of {count} emissions landed in run_metrics")
    return [
        Figure("metrics (SQLite)", f"{count:,} emissions from one node, into the table", "emissions/s",
               harness.median(rates), higher_is_better=True, target=TARGET_PER_S, samples=rates,
               note=f"{harness.median(statements):.0f} statements on run_metrics per run"),
        Figure("metrics (SQLite)", "the node's emit() loop alone (batch writes inside it included)", "emissions/s",
               harness.median(loop_rates), higher_is_better=True, samples=loop_rates,
               note="excludes the last batch, written after the node returns"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=100_000, help="emissions per run (default 100,000)")
    harness.add_common_arguments(parser)
    args = parser.parse_args()
    harness.isolate()
    if args.smoke:
        args.count, args.repeat = 5_000, 1
    harness.emit_figures(measure(args.count, args.repeat), args.json)


if __name__ == "__main__":
    main()
