"""Peers: the same chain and fan-out on Dask distributed's LocalCluster and on Prefect's local mode.

    .venv/bin/python benchmarks/peers.py [--chain 200] [--fanout 1000] [--repeat 3] [--prefect-python PATH]

Optional: needs ``dask[distributed]`` (and, for Prefect, ``prefect``) installed; a peer that is
not installed is skipped with a note. Prefect brings many packages, so it may live in a virtual
environment of its own: ``--prefect-python`` names that interpreter (default: this one).

* Dask: ``LocalCluster`` of ``--cpus`` worker processes, one thread each, on 127.0.0.1, no
  dashboard; a chain of ``client.submit(hop, previous)`` and a fan-out of ``client.submit(hop)``.
* Prefect: a ``@flow`` calling a ``@task`` ``--chain`` times in sequence, and ``task.map`` over
  ``--fanout`` items on the default thread-pool task runner, against Prefect's temporary local
  server (its state under a temporary ``PREFECT_HOME``).

Each peer runs in a child process of its own, with one warm-up of each shape first. ``run_all.py``
puts these figures beside fluksio's Redis figures of the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import harness  # noqa: E402
from benchmarks.harness import Figure  # noqa: E402


def hop(previous: int | None = None) -> int:
    return 0


def child_dask(length: int, width: int, repeat: int, cpus: int) -> dict[str, list[float]]:
    from dask.distributed import Client, LocalCluster

    with LocalCluster(n_workers=cpus, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None, scheduler_port=0) as cluster, Client(cluster) as client:
        def once(shape: str) -> float:
            started = time.time()
            if shape == "chain":
                future = client.submit(hop, pure=False)
                for _ in range(length - 1):
                    future = client.submit(hop, future, pure=False)
                future.result(timeout=harness.RUN_TIMEOUT_S)
            else:
                client.gather([client.submit(hop, pure=False) for _ in range(width)])
            return time.time() - started

        return _repeat(once, repeat)


def child_prefect(length: int, width: int, repeat: int) -> dict[str, list[float]]:
    from prefect import flow, task

    prefect_hop = task(hop, name="hop", persist_result=False)

    @flow(name="bench-chain", persist_result=False, log_prints=False)
    def chain_flow(n: int) -> int:
        value = None
        for _ in range(n):
            value = prefect_hop(value)
        return value  # type: ignore[return-value]

    @flow(name="bench-fanout", persist_result=False, log_prints=False)
    def fanout_flow(n: int) -> int:
        return len(prefect_hop.map([None] * n).result())

    def once(shape: str) -> float:
        started = time.time()
        if shape == "chain":
            chain_flow(length)
        else:
            fanout_flow(width)
        return time.time() - started

    return _repeat(once, repeat)


def _repeat(once, repeat: int) -> dict[str, list[float]]:  # type: ignore[no-untyped-def]
    once("chain"), once("fanout")  # warm-up (and, for Prefect, starting its temporary server)
    samples: dict[str, list[float]] = {"chain": [], "fanout": []}
    for _ in range(repeat):
        samples["chain"].append(once("chain"))
        samples["fanout"].append(once("fanout"))
    return samples


def run_child(peer: str, python: str, length: int, width: int, repeat: int, cpus: int,
              workdir: Path) -> dict[str, list[float]] | str:
    """The peer's samples, or why there are none."""
    module = {"dask": "distributed", "prefect": "prefect"}[peer]
    probe = subprocess.run([python, "-c", f"import {module}"], capture_output=True, timeout=120)
    if probe.returncode != 0:
        return f"not installed for {python} (pip install {'dask[distributed]' if peer == 'dask' else 'prefect'})"
    out = workdir / f"{peer}.json"
    env = {k: v for k, v in harness.child_env().items() if not k.startswith("PREFECT_")}
    env.update({
        "PREFECT_HOME": str(workdir / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_LOGGING_LEVEL": "WARNING",
        "PREFECT_SERVER_API_HOST": "127.0.0.1",
        "DO_NOT_TRACK": "1",
    })
    command = [python, __file__, "--child", peer, "--chain", str(length), "--fanout", str(width),
               "--repeat", str(repeat), "--cpus", str(cpus), "--child-out", str(out)]
    log = workdir / f"{peer}.log"
    with open(log, "wb") as sink:
        # Its own session, so the peer's helper processes (Dask workers, Prefect's server) go with it.
        process = subprocess.Popen(command, env=env, cwd=workdir, stdout=sink, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            process.wait(timeout=harness.RUN_TIMEOUT_S * 2)
        except subprocess.TimeoutExpired:
            return "timed out"
        finally:
            import signal

            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait(10)
    if process.returncode != 0 or not out.exists():
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
        return f"failed: {tail[0][:160]}"
    return json.loads(out.read_text())


def measure(length: int, width: int, repeat: int, cpus: int, prefect_python: str, budget_s: float,
            prefect_sizes: tuple[int, int] | None = None) -> list[Figure]:
    figures = []
    deadline = time.monotonic() + budget_s
    prefect_length, prefect_width = prefect_sizes or (length, width)
    with tempfile.TemporaryDirectory(prefix="fluksio-bench-peers-") as workdir:
        for peer, name, python, n_chain, n_fan in (
            ("dask", f"Dask LocalCluster ({cpus} procs)", sys.executable, length, width),
            ("prefect", "Prefect local (thread runner)", prefect_python, prefect_length, prefect_width),
        ):
            if time.monotonic() > deadline:
                break
            harness.progress(f"{name}: chain of {n_chain}, fan-out of {n_fan}, {repeat} repeat(s)")
            samples = run_child(peer, python, n_chain, n_fan, repeat, cpus, Path(workdir))
            if isinstance(samples, str):
                figures.append(Figure("peers: chain", f"{n_chain} dependent no-op nodes", "ms per hop", None,
                                      None, name, note=samples))
                continue
            hop_ms = [s / n_chain * 1000 for s in samples["chain"]]
            rate = [n_fan / s for s in samples["fanout"]]
            figures.append(Figure("peers: chain", f"{n_chain} dependent no-op nodes", "ms per hop", None,
                                  harness.median(hop_ms), name, baseline_samples=hop_ms,
                                  note="= per-task overhead (each no-op task waits for the one before)"))
            figures.append(Figure("peers: fan-out", f"{n_fan} independent no-op nodes", "calls/s", None,
                                  harness.median(rate), name, higher_is_better=True, baseline_samples=rate))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chain", type=int, default=200)
    parser.add_argument("--fanout", type=int, default=1000)
    parser.add_argument("--cpus", type=int, default=2, help="Dask worker processes (default 2)")
    parser.add_argument("--prefect-chain", type=int, help="Prefect's chain length (default: --chain)")
    parser.add_argument("--prefect-fanout", type=int, help="Prefect's fan-out width (default: --fanout)")
    parser.add_argument("--prefect-python", default=os.environ.get("BENCH_PREFECT_PYTHON", sys.executable),
                        help="the interpreter that has prefect installed (default: this one, "
                             "or $BENCH_PREFECT_PYTHON)")
    parser.add_argument("--child", choices=["dask", "prefect"], help=argparse.SUPPRESS)
    parser.add_argument("--child-out", help=argparse.SUPPRESS)
    harness.add_common_arguments(parser)
    args = parser.parse_args()
    harness.isolate()
    if args.smoke:
        args.chain, args.fanout, args.repeat = 20, 50, 1
        args.prefect_chain = args.prefect_fanout = None
    if args.child:
        if args.child == "dask":
            result = child_dask(args.chain, args.fanout, args.repeat, args.cpus)
        else:
            result = child_prefect(args.chain, args.fanout, args.repeat)
        Path(args.child_out).write_text(json.dumps(result))
        return
    prefect_sizes = (args.prefect_chain or args.chain, args.prefect_fanout or args.fanout)
    harness.emit_figures(measure(args.chain, args.fanout, args.repeat, args.cpus, args.prefect_python,
                                 args.budget_s, prefect_sizes), args.json)


if __name__ == "__main__":
    main()
