"""Submit latency: p50 and p99 of ``client.submit`` over 200 submits, embedded and on Redis.

    .venv/bin/python benchmarks/submit.py [--submits 200] [--repeat 3] [--no-redis]

Each submit journals a one-node run (``bench_one``, ``no_cache=True``) and hands it to a driver;
only the ``submit`` call is timed, back to back, while the runs already submitted are being
driven (as they would be). After each batch every run is waited for, so batches do not overlap.
Reported: the median over ``--repeat`` batches of each batch's p50 and p99.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import harness  # noqa: E402
from benchmarks.harness import Figure  # noqa: E402


def batches(client, submits: int, repeat: int, deadline: float) -> tuple[list[float], list[float]]:  # type: ignore[no-untyped-def]
    """Each batch's p50 and p99 of submit latency, in ms."""
    p50s, p99s = [], []
    client.submit("bench_one", {}, no_cache=True).wait(timeout=60)  # warm-up
    for _ in range(repeat):
        if time.monotonic() > deadline:
            break
        latencies, handles = [], []
        for _ in range(submits):
            started = time.perf_counter()
            handles.append(client.submit("bench_one", {}, no_cache=True))
            latencies.append((time.perf_counter() - started) * 1000)
        wait_until = time.monotonic() + harness.RUN_TIMEOUT_S
        for handle in handles:
            record = handle.wait(timeout=max(1.0, wait_until - time.monotonic()))
            if record.status.value != "ok":
                raise RuntimeError(f"run {handle.id} ended {record.status.value}: {record.status_reason}")
        cuts = statistics.quantiles(latencies, n=100, method="inclusive")
        p50s.append(cuts[49])
        p99s.append(cuts[98])
    return p50s, p99s


def measure(submits: int, repeat: int, with_redis: bool, budget_s: float) -> list[Figure]:
    from fluksio import Settings, connect

    deadline = time.monotonic() + budget_s
    figures = []
    harness.progress(f"embedded: {repeat} batch(es) of {submits} submits")
    with tempfile.TemporaryDirectory(prefix="fluksio-bench-") as workdir:
        settings = Settings(broker_url="memory://", database_url=f"sqlite:///{workdir}/fluksio.db",
                            artifacts_dir=Path(workdir) / "artifacts", cpus=2, flows=[str(harness.FLOWS_FILE)])
        with connect(settings) as client:
            p50s, p99s = batches(client, submits, repeat, deadline)
    figures += [
        Figure("submit (embedded)", f"client.submit p50 of {submits}", "ms", harness.median(p50s), samples=p50s),
        Figure("submit (embedded)", f"client.submit p99 of {submits}", "ms", harness.median(p99s), samples=p99s),
    ]
    if with_redis:
        harness.progress(f"Redis: {repeat} batch(es) of {submits} submits")
        with tempfile.TemporaryDirectory(prefix="fluksio-bench-") as workdir, \
                harness.redis_installation(Path(workdir), 2, "", raw_celery=False) as installation, \
                connect(installation["fluksio"]) as client:
            p50s, p99s = batches(client, submits, repeat, deadline)
        figures += [
            Figure("submit (Redis)", f"client.submit p50 of {submits}", "ms", harness.median(p50s), samples=p50s,
                   note="SQLite store"),
            Figure("submit (Redis)", f"client.submit p99 of {submits}", "ms", harness.median(p99s), samples=p99s,
                   note="SQLite store"),
        ]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--submits", type=int, default=200, help="submits per batch (default 200)")
    parser.add_argument("--no-redis", action="store_true", help="embedded only (no redis-server needed)")
    harness.add_common_arguments(parser)
    args = parser.parse_args()
    harness.isolate()
    if args.smoke:
        args.submits, args.repeat = 20, 1
    harness.emit_figures(measure(args.submits, args.repeat, not args.no_redis, args.budget_s), args.json)


if __name__ == "__main__":
    main()
