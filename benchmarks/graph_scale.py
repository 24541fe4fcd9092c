"""Scale: the driver's time and memory for graphs of 2,500, 5,000 and 10,000 nodes.

    .venv/bin/python benchmarks/graph_scale.py [--sizes 2500,5000,10000] [--repeat 3] [--end-to-end]

Three shapes: a wide fan-out (every node ready at once), a long chain (one ready at a time), and a
mapped node over a list of that many elements (one node, every element ready at once).
Each (shape, size) runs in a fresh child process, so memory figures do not mix:

* driver: fluksio's real ``drive()`` — walk, placer, node rows in SQLite, events — with an
  instant worker in place of Celery (every call sent is done, its grant given back and its outputs
  reported, by the time the driver next waits on its inbox), so what is timed is the driver's own
  cost per node, nothing in the broker; calls in flight stay within the machine's two slots, as
  with a real worker;
* memory: the driver's peak resident memory over the process's resident memory before the run
  (Linux ``VmHWM``, reset through ``/proc/self/clear_refs``);
* ``--end-to-end``: also the whole embedded path (``connect()``, real Celery workers), slower.

Linear growth means twice the nodes take at most 2.2× the time (the issue's bound).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import harness  # noqa: E402
from benchmarks.harness import Figure  # noqa: E402

#: The issue's bound on time(2n) / time(n).
DOUBLING_TARGET = 2.2


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def child(shape: str, size: int, end_to_end: bool) -> dict[str, Any]:
    from benchmarks.bench_flows import chain, fanout, mapped
    from fluksio import Settings
    from fluksio.driver.drive import drive
    from fluksio.messages import Completion, InboxMessage, NodeCall
    from fluksio.runs.submit import submit_run
    from fluksio.runtime import Runtime

    rss_start = _status_kb("VmRSS")
    started = time.perf_counter()
    flow = mapped if shape == "map" else (chain if shape == "chain" else fanout)(size)
    params = {"items": list(range(size))} if shape == "map" else {}
    flow.validate()
    build_s = time.perf_counter() - started
    graph_mb = max(0, _status_kb("VmRSS") - rss_start) / 1024
    with tempfile.TemporaryDirectory(prefix="fluksio-bench-") as workdir:
        settings = Settings(broker_url="memory://", database_url=f"sqlite:///{workdir}/fluksio.db",
                            artifacts_dir=Path(workdir) / "artifacts", cpus=2)
        if end_to_end:
            from fluksio import connect

            with connect(settings) as client:
                t0 = time.time()
                record = client.submit(flow, params, no_cache=True).wait(timeout=harness.RUN_TIMEOUT_S * 4)
                assert record.status.value == "ok", record.status_reason
                return {"build_s": build_s, "drive_s": record.finished_at.timestamp() - t0}
        runtime = Runtime.embedded(settings)
        try:
            run, _ = submit_run(runtime.db, runtime.registry, runtime.artifacts, flow, engine="embedded",
                                params=params, no_cache=True, embedded_machines=runtime.placer.machines())

            # An instant worker with the machine's slots: a call sent is done by the time the driver next
            # waits on its inbox; only then is its grant given back and its completion there. (Answering
            # inside dispatch would free the slot at once, so the driver would send every node of a
            # fan-out before taking one completion: 10,000 calls in flight, which no real worker allows.)
            sent: list[NodeCall] = []
            take = runtime.inbox.pop

            def dispatch(call: NodeCall, _queue: str, _display: str) -> None:
                sent.append(call)

            def answer(call: NodeCall) -> None:
                grant = call.grant
                runtime.placer.release(grant)
                now = datetime.now(timezone.utc).isoformat()
                node = flow.nodes[call.node]
                runtime.inbox.push(call.run_id, Completion(
                    call_id=call.call_id, node=call.node, index=call.index, attempt=call.attempt, status="ok",
                    machine=grant.machine,
                    started_at=now, finished_at=now, outputs={m: 0 for m in node.provides}, logs="",
                ))

            def pop(run_id: str, timeout: float) -> InboxMessage | None:
                while sent:
                    answer(sent.pop(0))
                return take(run_id, timeout)

            runtime.inbox.pop = pop  # type: ignore[method-assign]

            rss_before = _status_kb("VmRSS")
            peak_reset = _reset_peak()
            t0 = time.perf_counter()
            drive(runtime, run.id, dispatch, lambda _call_id: None)
            drive_s = time.perf_counter() - t0
            peak_kb = _status_kb("VmHWM") if peak_reset else _status_kb("VmRSS")
            status = runtime.db.engine.connect().exec_driver_sql(
                "SELECT status, status_reason FROM runs WHERE id = ?", (run.id,)).one()
            assert status[0] == "ok", status
        finally:
            runtime.close()
    return {"build_s": build_s, "graph_mb": graph_mb, "drive_s": drive_s,
            "peak_mb": max(0, peak_kb - rss_before) / 1024, "peak_exact": peak_reset}


def run_child(shape: str, size: int, end_to_end: bool) -> dict[str, Any]:
    arguments = ["--child", shape, "--sizes", str(size), *(["--end-to-end"] if end_to_end else [])]
    return harness.child_result(__file__, arguments, harness.RUN_TIMEOUT_S * 4, BENCH_FLOW_SIZES="")


def measure(sizes: list[int], repeat: int, end_to_end: bool, budget_s: float) -> list[Figure]:
    deadline = time.monotonic() + budget_s
    figures: list[Figure] = []
    for shape, label in (("fanout", "wide fan-out"), ("chain", "long chain"), ("map", "mapped node")):
        medians: dict[int, float] = {}
        what = "elements" if shape == "map" else "nodes"
        for size in sizes:
            if time.monotonic() > deadline:
                harness.progress(f"time budget spent: skipping {shape} of {size}")
                break
            harness.progress(f"driver, {label} of {size:,} {what}, {repeat} repeat(s)")
            results = [run_child(shape, size, False) for _ in range(repeat)]
            drive = [r["drive_s"] for r in results]
            medians[size] = harness.median(drive)
            peak = harness.median([r["peak_mb"] for r in results])
            graph = harness.median([r["graph_mb"] for r in results])
            build = harness.median([r["build_s"] for r in results])
            previous = sizes[sizes.index(size) - 1] if sizes.index(size) else None
            growth = ""
            if previous in medians:
                growth = f"; ×{size / previous:g} {what} → ×{medians[size] / medians[previous]:.2f} time"
            figures.append(Figure(
                f"scale: {label}", f"driver time, {size:,} {what}", "s", medians[size], samples=drive,
                note=(f"{medians[size] / size * 1e6:.0f} µs/{what[:-1]}; driver peak +{peak:.1f} MB RSS, the flow "
                      f"itself {graph:.1f} MB, built in {build:.2f} s{growth}"),
            ))
            if previous in medians and size == 2 * previous:
                ratio = medians[size] / medians[previous]
                figures.append(Figure(f"scale: {label}", f"time({size:,}) / time({previous:,})", "×", ratio,
                                      target=DOUBLING_TARGET, samples=[ratio]))
            if end_to_end and time.monotonic() < deadline:
                harness.progress(f"end to end (embedded), {label} of {size:,} {what}")
                e2e = [run_child(shape, size, True)["drive_s"] for _ in range(repeat)]
                figures.append(Figure(f"scale: {label}", f"embedded run end to end, {size:,} {what}", "s",
                                      harness.median(e2e), samples=e2e,
                                      note=f"{harness.median(e2e) / size * 1e3:.2f} ms/{what[:-1]}"))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="2500,5000,10000", help="node counts (default 2500,5000,10000)")
    parser.add_argument("--end-to-end", action="store_true", help="also time whole embedded runs (slower)")
    parser.add_argument("--child", choices=["chain", "fanout", "map"], help=argparse.SUPPRESS)
    parser.add_argument("--child-out", help=argparse.SUPPRESS)
    harness.add_common_arguments(parser)
    args = parser.parse_args()
    harness.isolate()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.child:
        result = child(args.child, sizes[0], args.end_to_end)
        Path(args.child_out).write_text(json.dumps(result))
        return
    if args.smoke:
        sizes, args.repeat = [200, 400], 1
    harness.emit_figures(measure(sizes, args.repeat, args.end_to_end, args.budget_s), args.json)


if __name__ == "__main__":
    main()
