"""GPU call start: from a GPU call's task starting to its node function starting, forked warm from the worker's
fork server against a fresh interpreter per call (``FLUKSIO_GPU_FORK_SERVER=false``), in the same run.

    .venv/bin/python benchmarks/gpu_start.py [--calls 20] [--table 1500000]

Starts a redis-server on a free 127.0.0.1 port and two ``fluksio worker``s with a fake GPU id each (the node
reads ``CUDA_VISIBLE_DEVICES``; no GPU is needed): ``warm`` (``--drivers``, fork server on) and ``fresh``
(fork server off). The flows file, made by the benchmark in its temporary folder, imports at top level a
module it also makes, ``heavy_table``, which builds a table of ``--table`` SHA-256 digests when imported —
a stand-in for a large framework such as PyTorch (no torch here). Each flow has one GPU node that returns the
wall-clock time it started; the figure is that time minus the call's ``started_at`` (written when the call
task starts on the worker, before the placer's start check and the ``node_started`` event). Runs of the two
flows alternate, one at a time, after one warm-up each; the medians (and the slowest) are reported.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import harness  # noqa: E402
from benchmarks.harness import Figure  # noqa: E402

#: The issue's target: task start → node function start of a warm GPU call, in milliseconds.
TARGET_MS = 50.0

HEAVY = '''\
"""Made by benchmarks/gpu_start.py: a module that takes a while to import, like a large framework."""
import hashlib
import os

TABLE = [hashlib.sha256(i.to_bytes(8, "little")).hexdigest() for i in range(int(os.environ["BENCH_TABLE"]))]
'''

FLOWS = '''\
"""Made by benchmarks/gpu_start.py: one GPU node per worker, each returning when it started."""
import os
import time

import heavy_table
from fluksio import Flow, Resources

for _label in ("warm", "fresh"):
    _flow = Flow(f"gpu_start_{_label}", outputs=["started"])

    def started() -> list:
        return [time.time(), os.environ.get("CUDA_VISIBLE_DEVICES"), len(heavy_table.TABLE)]

    _flow.node(started, name="started", provides="started", requires=[], device=_label,
               resources=Resources(cpus=1, gpus=1))
    globals()[_flow.name] = _flow
'''


def import_seconds(workdir: Path, env: dict[str, str]) -> float:
    """A fresh interpreter importing the heavy module (Python's own start-up included), in seconds."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", "import heavy_table"], cwd=workdir, env=env, check=True, timeout=300)
    return time.monotonic() - started


def start_ms(client, flow: str) -> float:  # type: ignore[no-untyped-def]
    record = client.submit(flow, no_cache=True).wait(timeout=harness.RUN_TIMEOUT_S)
    if record.status.value != "ok":
        raise RuntimeError(f"{flow} ended {record.status.value}: {record.status_reason}")
    function_started, devices, _ = record.result["started"]
    if devices != "0":
        raise RuntimeError(f"{flow}'s node saw CUDA_VISIBLE_DEVICES={devices!r}, granted 0")
    return (function_started - record.nodes[0].started_at.timestamp()) * 1000


def measure(calls: int, table: int, budget_s: float) -> list[Figure]:
    import redis

    from fluksio import Settings, connect

    deadline = time.monotonic() + budget_s
    with tempfile.TemporaryDirectory(prefix="fluksio-bench-gpu-") as folder:
        workdir = Path(folder)
        (workdir / "heavy_table.py").write_text(HEAVY)
        flows_file = workdir / "gpu_start_flows.py"
        flows_file.write_text(FLOWS)
        processes = harness.Processes(workdir)
        try:
            server = harness.RedisServer(workdir, processes).start()
            env = harness.fluksio_env(server.url(0), workdir, "")
            env.update({"FLUKSIO_FLOWS": str(flows_file), "BENCH_TABLE": str(table)})
            imported_s = import_seconds(workdir, env)
            harness.progress(f"a fresh interpreter imports heavy_table ({table:,} digests) in {imported_s:.2f} s")
            worker = [sys.executable, "-m", "fluksio.cli.main", "worker", "--cpus", "1", "--gpus", "0",
                      "--loglevel", "warning"]
            processes.start("warm", [*worker, "--name", "warm", "--labels", "warm", "--drivers"], env=env, cwd=workdir)
            processes.start("fresh", [*worker, "--name", "fresh", "--labels", "fresh"],
                            env={**env, "FLUKSIO_GPU_FORK_SERVER": "false"}, cwd=workdir)
            probe = redis.Redis.from_url(server.url(0))

            def attached() -> bool:
                processes.check_alive("warm")
                processes.check_alive("fresh")
                return all(probe.exists(f"fluksio:heartbeat:{name}") for name in ("warm", "fresh"))

            harness.wait_until(attached, 120, "both workers attaching")
            probe.close()
            sys.path.insert(0, str(workdir))
            os.environ["BENCH_TABLE"] = str(table)  # the client registers the same flows
            settings = Settings(broker_url=server.url(0), database_url=env["FLUKSIO_DATABASE_URL"],
                                artifacts_dir=Path(env["FLUKSIO_ARTIFACTS_DIR"]), flows=[str(flows_file)])
            with connect(settings) as client:
                start_ms(client, "gpu_start_warm")
                start_ms(client, "gpu_start_fresh")
                harness.progress(f"{calls} GPU calls each, alternating")
                samples = harness.interleaved({
                    "warm": lambda: start_ms(client, "gpu_start_warm"),
                    "fresh": lambda: start_ms(client, "gpu_start_fresh"),
                }, calls, deadline)
        finally:
            processes.stop_all()
    warm, fresh = samples["warm"], samples["fresh"]
    note = (f"{len(warm)} calls each; slowest {max(warm):.1f} vs {max(fresh):.0f} ms; the flow imports a module that "
            f"takes {imported_s:.2f} s to import in a fresh interpreter")
    return [
        Figure("GPU call start", "task start → node function, fork server", "ms", harness.median(warm),
               harness.median(fresh), "fresh interpreter", samples=warm, baseline_samples=fresh, note=note),
        Figure("GPU call start", "task start → node function, fork server (target)", "ms", harness.median(warm),
               target=TARGET_MS, samples=warm),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20, help="GPU calls of each kind (default 20)")
    parser.add_argument("--table", type=int, default=1_500_000,
                        help="digests the heavy module computes at import (default 1,500,000: about 1 s)")
    harness.add_common_arguments(parser, repeat=1)
    args = parser.parse_args()
    harness.isolate()
    if args.smoke:
        args.calls, args.table = 3, 200_000
    harness.emit_figures(measure(args.calls, args.table, args.budget_s), args.json)


if __name__ == "__main__":
    main()
