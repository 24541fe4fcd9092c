"""Values between nodes: the time one array or DataFrame takes from one node to the next.

    .venv/bin/python benchmarks/values.py [--sizes 1,20,200] [--repeat 3] [--prefect-python PATH]

* fluksio: an embedded run of two nodes, ``make`` → ``take``. ``make`` builds the value (not timed), reads
  the clock and returns it; ``take`` reads the clock when it is called. The hop is the difference: the
  value encoded once into the artifact store (``.npy`` / Parquet, hashed as it is written), the
  completion, the driver, the call, and the value read back. Both clocks are ``time.perf_counter`` of
  the one process the embedded default runs in.
* direct: the same value written to a file in the same folder and read back, in this process:
  ``np.save`` + ``np.load``, ``DataFrame.to_parquet`` + ``pd.read_parquet`` (pyarrow). The target is a hop
  of at most 1.5× that.
* Prefect (when ``prefect`` is importable by ``--prefect-python``): a flow of the same two tasks with
  ``persist_result=True`` — its results pickled (cloudpickle, its default serializer) into a temporary
  ``PREFECT_HOME`` — timed the same way, in a child process. Prefect hands the next task of the same flow
  run the object still in memory, so its hop pays for the pickle and the write, not for a read.

Sizes are MiB of float64 data (a DataFrame: 8 float64 columns). Figures are medians of ``--repeat`` runs
after one warm-up run (of 1 MiB) in each installation. The first row is the hop of a one-number JSON
list: the fixed cost of a hop, which the smallest sizes are dominated by.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import harness  # noqa: E402
from benchmarks.harness import Figure  # noqa: E402

#: The hop may take at most this many times the direct write and read of the same file.
TARGET_RATIO = 1.5
#: Columns of the benchmark's DataFrames.
COLUMNS = 8
KINDS = ("array", "frame")


def make_value(kind: str, mib: int) -> Any:
    """``mib`` MiB of float64 numbers: an array, or a DataFrame of :data:`COLUMNS` columns."""
    import numpy as np

    if kind == "number":
        return [1.0]
    count = mib * (1 << 20) // 8
    values = np.random.default_rng(0).random(count)
    if kind == "array":
        return values
    import pandas as pd

    rows = count // COLUMNS
    return pd.DataFrame({f"c{i}": values[i * rows:(i + 1) * rows] for i in range(COLUMNS)})


def make(kind: str, mib: int) -> dict[str, Any]:
    value = make_value(kind, mib)
    return {"value": value, "sent_at": time.perf_counter()}


def take(value: Any, sent_at: float) -> float:
    arrived = time.perf_counter()
    if len(value) == 0:
        raise ValueError("the value arrived empty")
    return arrived - sent_at


def hop_flow() -> Any:
    """``make`` → ``take`` as a flow (made here: the Prefect child needs no fluksio)."""
    from fluksio import Flow

    flow = Flow("bench_value_hop", inputs={"kind": str, "mib": int}, outputs=["seconds"])
    flow.node(make, provides=["value", "sent_at"])
    flow.node(take, provides="seconds")
    return flow


def fluksio_hops(kind: str, mib: int, repeat: int, workdir: Path) -> list[float]:
    from fluksio import Settings, connect

    settings = Settings(broker_url="memory://", database_url=f"sqlite:///{workdir / 'fluksio.db'}",
                        artifacts_dir=workdir / "artifacts", cpus=2)
    samples = []
    hop = hop_flow()
    with connect(settings) as client:
        warm_up = {"kind": kind, "mib": min(mib, 1)}
        client.submit(hop, warm_up, no_cache=True).wait(timeout=harness.RUN_TIMEOUT_S)
        for _ in range(repeat):
            record = client.submit(hop, {"kind": kind, "mib": mib}, no_cache=True).wait(timeout=harness.RUN_TIMEOUT_S)
            if record.status.value != "ok":
                raise RuntimeError(f"{hop.name} ended {record.status.value}: {[n.error for n in record.nodes]}")
            samples.append(record.result["seconds"])
    return samples


def direct_hops(kind: str, mib: int, repeat: int, workdir: Path) -> list[float]:
    """Write the value to a file beside the artifacts and read it back: what a hop cannot beat."""
    import numpy as np
    import pandas as pd

    value = make_value(kind, mib)
    folder = workdir / "artifacts"
    folder.mkdir(parents=True, exist_ok=True)
    samples = []
    for attempt in range(repeat + 1):  # the first is a warm-up
        path = folder / f"direct-{attempt}.{'npy' if kind == 'array' else 'parquet'}"
        started = time.perf_counter()
        if kind == "array":
            np.save(path, value, allow_pickle=False)
            back = np.load(path, allow_pickle=False)
        else:
            value.to_parquet(path, engine="pyarrow")
            back = pd.read_parquet(path, engine="pyarrow")
        elapsed = time.perf_counter() - started
        if len(back) != len(value):
            raise RuntimeError("the direct read came back short")
        path.unlink()
        if attempt:
            samples.append(elapsed)
    return samples


def child_prefect(kind: str, mib: int, repeat: int) -> list[float]:
    import uuid

    from prefect import flow, task

    # Persisted (pickled and written: Prefect's result store) under its default cache policy; ``nonce`` makes
    # each run's inputs its own, so no repeat is served from that cache (a task without a cache key, as under
    # NO_CACHE, is not persisted at all).
    @task(persist_result=True)
    def prefect_make(kind: str, mib: int, nonce: str) -> tuple[Any, float]:
        value = make_value(kind, mib)
        return value, time.perf_counter()

    @task(persist_result=True)
    def prefect_take(made: tuple[Any, float], nonce: str) -> float:
        arrived = time.perf_counter()
        return arrived - made[1]

    @flow(name="bench-value-hop", persist_result=True, log_prints=False)
    def two_tasks(kind: str, mib: int, nonce: str) -> float:
        return prefect_take(prefect_make(kind, mib, nonce), nonce)

    two_tasks(kind, 1, uuid.uuid4().hex)  # warm-up (and Prefect's temporary server starting)
    return [two_tasks(kind, mib, uuid.uuid4().hex) for _ in range(repeat)]


def prefect_hops(python: str, kind: str, mib: int, repeat: int, workdir: Path) -> list[float] | str:
    """Prefect's samples, or why there are none."""
    probe = subprocess.run([python, "-c", "import prefect"], capture_output=True, timeout=120)
    if probe.returncode != 0:
        return f"Prefect is not installed for {python} (pip install prefect): row skipped"
    out = workdir / f"prefect-{kind}-{mib}.json"
    env = {k: v for k, v in harness.child_env().items() if not k.startswith("PREFECT_")}
    env.update({"PREFECT_HOME": str(workdir / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                "PREFECT_LOGGING_LEVEL": "WARNING", "PREFECT_SERVER_API_HOST": "127.0.0.1", "DO_NOT_TRACK": "1",
                "PREFECT_LOCAL_STORAGE_PATH": str(workdir / "prefect" / "storage")})
    command = [python, __file__, "--child-prefect", kind, "--sizes", str(mib), "--repeat", str(repeat),
               "--child-out", str(out)]
    log = workdir / "prefect.log"
    with open(log, "ab") as sink:
        process = subprocess.Popen(command, env=env, cwd=workdir, stdout=sink, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            process.wait(timeout=harness.RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return "Prefect timed out"
        finally:
            try:  # its temporary server goes with it
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait(10)
    if process.returncode != 0 or not out.exists():
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
        return f"Prefect failed: {tail[0][:160]}"
    return [float(s) for s in json.loads(out.read_text())]


def measure(sizes: list[int], repeat: int, prefect_python: str, budget_s: float) -> list[Figure]:
    figures = []
    deadline = time.monotonic() + budget_s
    with tempfile.TemporaryDirectory(prefix="fluksio-bench-values-") as scratch:
        workdir = Path(scratch)
        # What a hop costs whatever it carries: the same two nodes passing a one-number JSON list.
        fixed = fluksio_hops("number", 0, repeat, workdir / "fluksio-number")
        figures.append(Figure("values: JSON", "hop, [1.0]", "s", harness.median(fixed), samples=fixed,
                              note="the fixed cost of a hop, for the rows below"))
        for kind in KINDS:
            what = "numpy array (.npy)" if kind == "array" else f"DataFrame, {COLUMNS} columns (Parquet)"
            for mib in sizes:
                if time.monotonic() > deadline:
                    harness.progress("time budget spent: stopping")
                    return figures
                harness.progress(f"{what}: {mib} MiB, {repeat} repeat(s)")
                ours = fluksio_hops(kind, mib, repeat, workdir / f"fluksio-{kind}-{mib}")
                direct = direct_hops(kind, mib, repeat, workdir / f"fluksio-{kind}-{mib}")
                section = f"values: {what}"
                figures.append(Figure(section, f"hop, {mib} MiB", "s", harness.median(ours), harness.median(direct),
                                      "write + read the file", target=TARGET_RATIO, samples=ours,
                                      baseline_samples=direct))
                peer = prefect_hops(prefect_python, kind, mib, repeat, workdir)
                if isinstance(peer, str):
                    harness.progress(peer)
                    if not peer.startswith("Prefect is not installed"):  # it is, and failed: the table says so
                        figures.append(Figure(section, f"hop, {mib} MiB", "s", harness.median(ours), None,
                                              "Prefect, pickled results", note=peer))
                    continue
                figures.append(Figure(section, f"hop, {mib} MiB", "s", harness.median(ours), harness.median(peer),
                                      "Prefect, pickled results", samples=ours, baseline_samples=peer))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,20,200", help="MiB per value, comma-separated (default 1,20,200)")
    parser.add_argument("--prefect-python", default=os.environ.get("BENCH_PREFECT_PYTHON", sys.executable),
                        help="the interpreter that has prefect installed (default: this one, or "
                             "$BENCH_PREFECT_PYTHON)")
    parser.add_argument("--child-prefect", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--child-out", help=argparse.SUPPRESS)
    harness.add_common_arguments(parser)
    args = parser.parse_args()
    harness.isolate()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.smoke:
        sizes, args.repeat = [1], 1
    if args.child_prefect:
        Path(args.child_out).write_text(json.dumps(child_prefect(args.child_prefect, sizes[0], args.repeat)))
        return
    harness.emit_figures(measure(sizes, args.repeat, args.prefect_python, args.budget_s), args.json)


if __name__ == "__main__":
    main()
