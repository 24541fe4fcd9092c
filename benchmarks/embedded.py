"""The embedded default: chain and fan-out against raw Celery on ``memory://``, and cold start.

    .venv/bin/python benchmarks/embedded.py [--chain 200] [--fanout 1000] [--repeat 3] [--cpus 2]

* fluksio: ``connect()`` with no broker (kombu's memory transport, in-process thread workers,
  SQLite in a temporary folder), ``--cpus`` node slots.
* raw Celery: one app on ``memory://`` with a ``threads`` worker of the same concurrency in the
  same process, tuned as docs/architecture.md ("Tuning the embedded default") describes: transport
  ``polling_interval`` 1 ms, results from ``cache+memory://`` polled every 1 ms, and the worker's
  blocking drain capped at 1 ms.
  (Celery 5.6's blocking loop — used on transports without an event loop, such as memory —
  performs acknowledgements only between two drains, and a drain waits up to 2 s when the
  prefetch window is full: untuned, a backed-up queue moves one prefetch window per 2 s.)

Each side runs in a fresh child process of its own (the other side's idle workers, raw Celery's
polling every 1 ms, would slow it down), does one warm-up run of each shape, then ``--repeat`` runs
of each.

Cold start: wall time from starting ``fluksio run bench_flows.py:bench_cold`` until its only node
starts (the node writes the time), with an empty ``.fluksio`` folder and again with the store
already made; and until the command exits.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import harness  # noqa: E402
from benchmarks.harness import Figure  # noqa: E402

CHAIN_TARGET = 2.0
FANOUT_TARGET = 0.7
#: Raw Celery's tuned idle poll on memory:// and its result poll, in seconds.
RAW_POLL_S = 0.001


def child_fluksio(length: int, width: int, repeat: int, cpus: int) -> dict[str, list[float]]:
    from benchmarks.bench_flows import chain, fanout
    from fluksio import Settings, connect

    flows = {"chain": chain(length), "fanout": fanout(width)}
    with tempfile.TemporaryDirectory(prefix="fluksio-bench-") as workdir:
        settings = Settings(broker_url="memory://", database_url=f"sqlite:///{workdir}/fluksio.db",
                            artifacts_dir=Path(workdir) / "artifacts", cpus=cpus)
        with connect(settings) as client:
            from sqlalchemy import event

            statements = {"n": 0}

            def count(*_args: object) -> None:
                statements["n"] += 1

            db = client._runtime.db
            for engine in {db.engine, db.write_engine}:
                event.listen(engine, "before_cursor_execute", count)

            def once(shape: str) -> float:
                started = time.time()
                record = client.submit(flows[shape], {}, no_cache=True).wait(timeout=harness.RUN_TIMEOUT_S)
                if record.status.value != "ok":
                    raise RuntimeError(f"{shape} ended {record.status.value}: {record.status_reason}")
                return record.finished_at.timestamp() - started

            samples = _repeat(once, repeat)
            # SQL per hop over one more chain, from submit to end (the client's own waiting included).
            statements["n"] = 0
            once("chain")
            samples["sql_per_hop"] = [statements["n"] / length]
            return samples


def child_celery(length: int, width: int, repeat: int, cpus: int) -> dict[str, list[float]]:
    from celery import chain, group
    from celery.worker import WorkController
    from kombu.transport import memory

    from benchmarks.raw_celery import make_app

    class QuickDrainTransport(memory.Transport):
        def drain_events(self, connection: object, timeout: float | None = None) -> object:
            return super().drain_events(connection, timeout=min(timeout or RAW_POLL_S, RAW_POLL_S))

    app = make_app("memory://localhost/", "cache+memory://", broker_transport=QuickDrainTransport,
                   broker_transport_options={"polling_interval": RAW_POLL_S},
                   worker_enable_remote_control=False)
    # The threads pool runs a task by name in the *default* app; this child has only this one.
    app.set_default()
    app.set_current()
    noop = app.signature("rawbench.noop")
    worker = WorkController(app=app, hostname="raw@embedded", pool_cls="threads", concurrency=cpus,
                            without_heartbeat=True, without_mingle=True, without_gossip=True, loglevel="WARNING")
    thread = threading.Thread(target=worker.start, name="raw-celery-worker", daemon=True)
    thread.start()
    try:
        def once(shape: str) -> float:
            started = time.time()
            if shape == "chain":
                result = chain(noop.clone() for _ in range(length)).apply_async()
            else:
                result = group(noop.clone() for _ in range(width)).apply_async()
            # The worker lives in this process, so Celery thinks this get() is inside a task.
            result.get(timeout=harness.RUN_TIMEOUT_S, interval=RAW_POLL_S, disable_sync_subtasks=False)
            return time.time() - started

        return _repeat(once, repeat)
    finally:
        worker.stop(in_sighandler=False)
        thread.join(10)


def _repeat(once, repeat: int) -> dict[str, list[float]]:  # type: ignore[no-untyped-def]
    once("chain"), once("fanout")  # warm-up
    samples: dict[str, list[float]] = {"chain": [], "fanout": []}
    for _ in range(repeat):
        samples["chain"].append(once("chain"))
        samples["fanout"].append(once("fanout"))
    return samples


def run_child(side: str, length: int, width: int, repeat: int, cpus: int) -> dict[str, list[float]]:
    return harness.child_result(__file__, ["--child", side, "--chain", str(length), "--fanout", str(width),
                                           "--repeat", str(repeat), "--cpus", str(cpus)],
                                harness.RUN_TIMEOUT_S * (2 + 2 * repeat))


def fluksio_command() -> list[str]:
    script = Path(sys.executable).with_name("fluksio")
    return [str(script)] if script.exists() else [sys.executable, "-m", "fluksio.cli.main"]


def cold_start_once(workdir: Path) -> tuple[float, float]:
    """Seconds from starting ``fluksio run`` to its first node starting, and to the command's exit."""
    mark = workdir / f"mark-{time.monotonic_ns()}"
    env = harness.child_env(FLUKSIO_CONFIG=str(workdir / "no-such.toml"), BENCH_FLOW_SIZES="")
    command = [*fluksio_command(), "run", f"{harness.FLOWS_FILE}:cold", "-p", f"mark={mark}", "--no-cache"]
    started = time.time()
    subprocess.run(command, cwd=workdir, env=env, check=True, timeout=120, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    exited = time.time()
    return float(mark.read_text()) - started, exited - started


def import_s() -> float:
    """Seconds from starting a fresh interpreter until it has imported fluksio's CLI (part of every cold start)."""
    started = time.time()
    out = subprocess.run([sys.executable, "-c", "import time, fluksio.cli.main; print(repr(time.time()))"],
                         check=True, timeout=60, env=harness.child_env(), cwd=tempfile.gettempdir(),
                         capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1]) - started


def measure(length: int, width: int, repeat: int, cpus: int, budget_s: float) -> list[Figure]:
    harness.progress(f"embedded fluksio: chain of {length}, fan-out of {width}, {repeat} repeat(s)")
    ours = run_child("fluksio", length, width, repeat, cpus)
    harness.progress("raw Celery on memory://")
    theirs = run_child("celery", length, width, repeat, cpus)
    harness.progress("cold start of `fluksio run`")
    first_fresh, first_warm, exit_warm = [], [], []
    with tempfile.TemporaryDirectory(prefix="fluksio-bench-cold-") as root:
        warm = Path(root) / "warm"
        warm.mkdir()
        cold_start_once(warm)  # makes the store, and warms the OS's file cache
        for i in range(repeat):
            fresh = Path(root) / f"fresh{i}"
            fresh.mkdir()
            first_fresh.append(cold_start_once(fresh)[0])
            to_node, to_exit = cold_start_once(warm)
            first_warm.append(to_node)
            exit_warm.append(to_exit)
    imports = [import_s() for _ in range(repeat)]
    hop = {side: [s / length * 1000 for s in samples["chain"]] for side, samples in (("f", ours), ("c", theirs))}
    rate = {side: [width / s for s in samples["fanout"]] for side, samples in (("f", ours), ("c", theirs))}
    note = f"{cpus} thread slots each"
    figures = [
        Figure("chain (embedded)", f"{length} dependent no-op nodes", "ms per hop",
               harness.median(hop["f"]), harness.median(hop["c"]), "raw Celery memory:// (1 ms poll)",
               target=CHAIN_TARGET, samples=hop["f"], baseline_samples=hop["c"], note=note),
        Figure("chain (embedded)", "SQL statements per hop (fluksio)", "statements", ours["sql_per_hop"][0],
               note="all statements of one chain run, the client's polling of its status included"),
        Figure("fan-out (embedded)", f"{width} independent no-op nodes", "calls/s",
               harness.median(rate["f"]), harness.median(rate["c"]), "raw Celery memory:// (1 ms poll)",
               higher_is_better=True, target=FANOUT_TARGET, samples=rate["f"], baseline_samples=rate["c"],
               note=note + " (target: the Redis fan-out's)"),
        Figure("cold start (embedded)", "`fluksio run` → first node starts, empty .fluksio", "ms",
               harness.median(first_fresh) * 1000, samples=[s * 1000 for s in first_fresh],
               note="includes creating the SQLite store"),
        Figure("cold start (embedded)", "`fluksio run` → first node starts, store exists", "ms",
               harness.median(first_warm) * 1000, samples=[s * 1000 for s in first_warm]),
        Figure("cold start (embedded)", "`fluksio run` → command exits, store exists", "ms",
               harness.median(exit_warm) * 1000, samples=[s * 1000 for s in exit_warm]),
        Figure("cold start (embedded)", "new interpreter → `import fluksio.cli.main` done", "ms",
               harness.median(imports) * 1000, samples=[s * 1000 for s in imports],
               note="part of every cold start"),
    ]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chain", type=int, default=200)
    parser.add_argument("--fanout", type=int, default=1000)
    parser.add_argument("--cpus", type=int, default=2, help="node slots (threads) of each side (default 2)")
    parser.add_argument("--child", choices=["fluksio", "celery"], help=argparse.SUPPRESS)
    parser.add_argument("--child-out", help=argparse.SUPPRESS)
    harness.add_common_arguments(parser)
    args = parser.parse_args()
    harness.isolate()
    if args.smoke:
        args.chain, args.fanout, args.repeat = 20, 50, 1
    if args.child:
        if args.child == "fluksio":
            result = child_fluksio(args.chain, args.fanout, args.repeat, args.cpus)
        else:
            result = child_celery(args.chain, args.fanout, args.repeat, args.cpus)
        Path(args.child_out).write_text(json.dumps(result))
        return
    harness.emit_figures(measure(args.chain, args.fanout, args.repeat, args.cpus, args.budget_s), args.json)


if __name__ == "__main__":
    main()
