"""Values between nodes: the time one array or DataFrame takes from one node to the next.

    .venv/bin/python benchmarks/values.py [--sizes 1,20,200] [--repeat 3] [--prefect-python PATH]

* fluksio: an embedded run of two nodes, ``make`` → ``take``. ``make`` builds the value (not timed), reads
  the clock and returns it; ``take`` reads every number of the value it receives (a sum) and then the
  clock. The hop is the difference: the value encoded once into the artifact store (``.npy`` / Parquet,
  digested as it is written), the completion, the driver, the call, and the value read back. Both clocks
  are ``time.perf_counter`` of the one process the embedded default runs in.
* direct: the same value written to a file in the same folder, read back and summed, in this process:
  ``np.save`` + ``np.load``, ``DataFrame.to_parquet`` + ``pd.read_parquet`` (pyarrow). The target is a hop
  of at most 1.5× that. Every side sums what it receives because fluksio maps a large array's file
  instead of reading it: its bytes are read only when touched, and a consumer that never touched them
  would hide that read.
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


def touch(value: Any) -> float:
    """The sum of every number in ``value``: what makes a consumer read all of it."""
    if isinstance(value, list):
        return float(sum(value))
    total = value.sum()
    return float(total if value.ndim == 1 else total.sum())


def take(value: Any, sent_at: float) -> float:
    if len(value) == 0:
        raise ValueError("the value arrived empty")
    touch(value)
    return time.perf_counter() - sent_at


def hop_flow() -> Any:
    """``make`` → ``take`` as a flow (made here: the Prefect child needs no fluksio)."""
    from fluksio import Flow

    flow = Flow("bench_value_hop", inputs={"kind": str, "mib": int}, outputs=["seconds"])
    flow.node(make, provides=["value", "sent_at"])
    flow.node(take, provides="seconds")
    return flow


def paired_hops(kind: str, mib: int, repeat: int, workdir: Path) -> tuple[list[float], list[float]]:
    """Samples of fluksio's hop and of the direct write and read, taken in turns: the kernel writes the
    files of both back to disk behind them, and taking them in turns puts both under the same load. A
    JSON ``number`` has no file to compare with: its direct samples are none."""
    from fluksio import Settings, connect

    settings = Settings(broker_url="memory://", database_url=f"sqlite:///{workdir / 'fluksio.db'}",
                        artifacts_dir=workdir / "artifacts", cpus=2)
    direct = DirectHop(kind, mib, workdir / "direct") if kind in KINDS else None
    ours, theirs = [], []
    hop = hop_flow()
    with connect(settings) as client:
        warm_up = {"kind": kind, "mib": min(mib, 1)}
        client.submit(hop, warm_up, no_cache=True).wait(timeout=harness.RUN_TIMEOUT_S)
        if direct is not None:
            direct.sample()  # its warm-up
        for _ in range(repeat):
            record = client.submit(hop, {"kind": kind, "mib": mib}, no_cache=True).wait(timeout=harness.RUN_TIMEOUT_S)
            if record.status.value != "ok":
                raise RuntimeError(f"{hop.name} ended {record.status.value}: {[n.error for n in record.nodes]}")
            ours.append(record.result["seconds"])
            if direct is not None:
                theirs.append(direct.sample())
    return ours, theirs


class DirectHop:
    """The value written to a file beside the artifacts and read back: what a hop cannot beat.

    Each file is kept, as the artifact store keeps each value: a file removed right after it was read never
    has its pages written back to the disk, and on the benchmark host that made a direct write of 200 MiB
    look 5× cheaper (49–55 ms) than the same write kept (226–276 ms), a cost the store cannot skip.
    """

    def __init__(self, kind: str, mib: int, folder: Path) -> None:
        self.kind = kind
        self.value = make_value(kind, mib)
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.taken = 0

    def sample(self) -> float:
        import numpy as np
        import pandas as pd

        self.taken += 1
        path = self.folder / f"direct-{self.taken}.{'npy' if self.kind == 'array' else 'parquet'}"
        started = time.perf_counter()
        if self.kind == "array":
            np.save(path, self.value, allow_pickle=False)
            back = np.load(path, allow_pickle=False)
        else:
            self.value.to_parquet(path, engine="pyarrow")
            back = pd.read_parquet(path, engine="pyarrow")
        touch(back)
        elapsed = time.perf_counter() - started
        if len(back) != len(self.value):
            raise RuntimeError("the direct read came back short")
        return elapsed


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
        touch(made[0])
        return time.perf_counter() - made[1]

    @flow(name="bench-value-hop", persist_result=True, log_prints=False)
    def two_tasks(kind: str, mib: int, nonce: str) -> float:
        return prefect_take(prefect_make(kind, mib, nonce), nonce)

    two_tasks(kind, 1, uuid.uuid4().hex)  # warm-up (and Prefect's temporary server starting)
    return [two_tasks(kind, mib, uuid.uuid4().hex) for _ in range(repeat)]


def prefect_hops(python: str, kind: str, mib: int, repeat: int, workdir: Path) -> list[float] | str:
    """Prefect's samples, or why there are none."""
    try:
        probe = subprocess.run([python, "-c", "import prefect"], capture_output=True, timeout=120)
    except OSError as exc:
        return f"Prefect is not installed for {python} (no interpreter there: {exc.strerror}): row skipped"
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


def measure(sizes: list[int], repeat: int, prefect_python: str, budget_s: float,
            folder: str | None = None) -> list[Figure]:
    figures = []
    deadline = time.monotonic() + budget_s
    with tempfile.TemporaryDirectory(prefix="fluksio-bench-values-", dir=folder) as scratch:
        workdir = Path(scratch)
        # What a hop costs whatever it carries: the same two nodes passing a one-number JSON list.
        fixed, _ = paired_hops("number", 0, repeat, workdir / "fluksio-number")
        figures.append(Figure("values: JSON", "hop, [1.0]", "s", harness.median(fixed), samples=fixed,
                              note="the fixed cost of a hop, for the rows below"))
        for kind in KINDS:
            what = "numpy array (.npy)" if kind == "array" else f"DataFrame, {COLUMNS} columns (Parquet)"
            for mib in sizes:
                if time.monotonic() > deadline:
                    harness.progress("time budget spent: stopping")
                    return figures
                harness.progress(f"{what}: {mib} MiB, {repeat} repeat(s)")
                ours, direct = paired_hops(kind, mib, repeat, workdir / f"fluksio-{kind}-{mib}")
                section = f"values: {what}"
                # What the value itself costs: the hop less a JSON value's, against the same direct pair.
                carried = harness.median(ours) - harness.median(fixed)
                figures.append(Figure(section, f"hop, {mib} MiB", "s", harness.median(ours), harness.median(direct),
                                      "write + read the file", target=TARGET_RATIO, samples=ours,
                                      baseline_samples=direct,
                                      note=f"less the JSON hop: {carried:.3f} s, "
                                           f"{carried / harness.median(direct):.2f}× the direct pair"))
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
    parser.add_argument("--dir", help="the folder every side writes its files below (default: the system's temporary "
                             "folder); /dev/shm takes the disk's write-back out of the figures")
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
    harness.emit_figures(measure(sizes, args.repeat, args.prefect_python, args.budget_s, args.dir), args.json)


if __name__ == "__main__":
    main()
