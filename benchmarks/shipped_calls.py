"""Shipped code (#32): calls of a flow the worker never registered, run from the run's code package, against the
same flows registered on the worker (``FLUKSIO_FLOWS``), on one Redis installation, in the same run.

    .venv/bin/python benchmarks/shipped_calls.py [--chain 200] [--fanout 1000] [--repeat 5] [--gpu-calls 20]

Starts a redis-server on a free 127.0.0.1 port and one ``fluksio worker --drivers --accept-code any --cpus 2
--gpus none`` (``bench``) whose ``FLUKSIO_FLOWS`` is benchmarks/bench_flows.py and a GPU flow file the benchmark
writes. The client submits the registered flows by name and the shipped ones as ``fluksio run flows.py:…``
does: loaded from project folders the worker never saw (so each run carries a code package the worker fetches,
unpacks into its code cache and runs in one of the runners of that package's server, a child of its fork server:
a process forked once that runs the package's CPU calls one after another; a GPU call is forked on its own).

* first call of a new package: a one-node no-op flow from a fresh project folder (``flows.py`` importing a
  ``helpers.py`` whose constant differs: a new package each repeat) against bench_flows' one-node ``bench_one``;
  ``client.submit`` → the run's ``finished_at``. The shipped side pays the package's store (``put``), the
  driver's reading of its graph, the worker's fetch and unpack, the package server's start and import, the start
  of a runner (a fork and its runtime).
  The projects are written before timing and loaded by the client just before their submit, outside the time.
  One warm-up of each first (the worker's very first package is in the note).
* later calls of a package: a chain of ``--chain`` dependent no-op nodes and a fan-out of ``--fanout``
  independent ones, from one project whose package server is already up (after a warm-up run of each), against
  bench_flows' chain and fan-out run in the pool processes; ms per hop and calls/s as ``celery_redis.py``
  takes them (submit → ``finished_at``).
* GPU call start: a second worker joins (``--name gpu --labels gpu --gpus 0 --cpus 1 --accept-code any``;
  fake GPU id 0: no GPU is needed and no CUDA is started); a one-node flow (``device="gpu"``, one GPU) whose
  node's first line writes ``time.time()`` to a file, shipped in the warm project (its package server started
  by a warm-up call) against the same flow registered on that worker (forked from its fork server). The figure
  is that time less the node's ``started_at`` (the call task starting on the worker, before its
  ``node_started`` event). ``--gpu-calls`` of each, one at a time, alternating.

Each figure is the median of ``--repeat`` runs (``--gpu-calls`` for the GPU start), the two sides alternating
so drift hits both alike. Targets are reported, never asserted.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import harness  # noqa: E402
from benchmarks.bench_flows import chain_name, fanout_name  # noqa: E402
from benchmarks.harness import Figure  # noqa: E402

#: #32's targets: a new package's first call at most this many ms more than a registered flow's; later calls'
#: chain ms per hop at most this ratio, fan-out calls/s at least this ratio; a GPU call's start from a package
#: server at most this many ms.
FIRST_CALL_EXTRA_MS = 300.0
CHAIN_RATIO, FANOUT_RATIO = 1.1, 0.9
GPU_START_MS = 50.0

#: The GPU flow the workers register (written into the benchmark's folder, named in their FLUKSIO_FLOWS).
REGISTERED_GPU = '''\
"""Made by benchmarks/shipped_calls.py: a GPU node, registered on the workers, that notes when it started."""
import os
import time

from fluksio import Flow, Resources

registered_gpu = Flow("registered_gpu", inputs={"mark": str}, outputs=["devices"])


@registered_gpu.node(provides="devices", device="gpu", resources=Resources(cpus=1, gpus=1))
def started(mark: str):
    now = time.time()  # the node function's first line
    with open(mark, "w") as out:
        out.write(repr(now))
    return os.environ.get("CUDA_VISIBLE_DEVICES")
'''

#: A new package each repeat: the constant in helpers.py differs.
NEW_HELPERS = 'CONSTANT = {constant!r}\n'
NEW_FLOWS = '''\
"""Made by benchmarks/shipped_calls.py: one no-op node, from a project folder no worker holds."""
import helpers
from fluksio import Flow

shipped_first = Flow("shipped_first", outputs=["x"])


def hop(previous=None):
    return helpers.CONSTANT


shipped_first.node(hop, name="only", provides="x", requires=[])
'''

#: The warm project: the chain, the fan-out and the GPU node, as bench_flows.py and REGISTERED_GPU make them.
WARM_FLOWS = '''\
"""Made by benchmarks/shipped_calls.py: the chain, fan-out and GPU node of bench_flows.py, shipped."""
import os
import time

import helpers
from fluksio import Flow, Resources


def hop(previous=None):
    return 0


shipped_chain = Flow("shipped_chain", outputs=["m{last}"])
for i in range({chain}):
    shipped_chain.node(hop, name=f"n{{i}}", provides=f"m{{i}}", requires=[f"m{{i - 1}}"] if i else [])

shipped_fanout = Flow("shipped_fanout", outputs=["m0"])
for i in range({fanout}):
    shipped_fanout.node(hop, name=f"n{{i}}", provides=f"m{{i}}", requires=[])

shipped_gpu = Flow("shipped_gpu", inputs={{"mark": str}}, outputs=["devices"])


@shipped_gpu.node(provides="devices", device="gpu", resources=Resources(cpus=1, gpus=1))
def started(mark: str):
    now = time.time()  # the node function's first line
    with open(mark, "w") as out:
        out.write(repr(now))
    return os.environ.get("CUDA_VISIBLE_DEVICES")
'''


def write_project(folder: Path, flows: str, constant: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "helpers.py").write_text(NEW_HELPERS.format(constant=constant))
    (folder / "flows.py").write_text(flows)
    return folder / "flows.py"


def load(reference: str) -> Any:
    """The flow ``file.py:attr`` names, as ``fluksio run`` loads it (its package digested here)."""
    from fluksio.flows.registry import load_flows

    sys.modules.pop("helpers", None)  # each project's own helpers.py, not the last one's
    try:
        [flow] = load_flows(reference)
    finally:
        sys.modules.pop("helpers", None)
    return flow


def run_record(client, flow, params: dict | None = None) -> tuple[float, Any]:  # type: ignore[no-untyped-def]
    """Seconds from submit to the run's end as the driver recorded it, and the run's record."""
    started = time.time()
    record = client.submit(flow, params or {}, no_cache=True).wait(timeout=harness.RUN_TIMEOUT_S)
    if record.status.value != "ok":
        name = flow if isinstance(flow, str) else flow.name
        raise RuntimeError(f"{name} ended {record.status.value}: {record.status_reason} "
                           f"{[(n.node, n.error) for n in record.nodes if n.error]}")
    return record.finished_at.timestamp() - started, record


def run_s(client, flow, params: dict | None = None) -> float:  # type: ignore[no-untyped-def]
    return run_record(client, flow, params)[0]


def check_where(record, shipped: bool, machine: str, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    """The run ran where it should: on ``machine``, from a package (``code_entry``) exactly when ``shipped``."""
    machines = {n.machine for n in record.nodes}
    if machines != {machine}:
        raise RuntimeError(f"run {record.id} of {record.flow} ran on {machines}, expected {machine}")
    cached = (workdir / machine / ".fluksio" / "code" / ("sha256-" + record.code_digest.removeprefix("sha256:")))
    if cached.is_dir() != shipped:
        raise RuntimeError(f"run {record.id} of {record.flow}: its package {record.code_digest} is "
                           f"{'not ' if shipped else ''}in {machine}'s code cache: it ran "
                           f"{'registered' if shipped else 'shipped'}")


def first_call_figures(client, workdir: Path, repeat: int, deadline: float) -> list[Figure]:  # type: ignore[no-untyped-def]
    """A new package's first call against a registered one-node flow's call."""
    projects = [write_project(workdir / "projects" / f"new-{i}", NEW_FLOWS, f"new package {i} {uuid.uuid4().hex}")
                for i in range(repeat + 1)]
    time.sleep(0.2)  # settled files: the client trusts their stat state (flows/imports.py SETTLE_NS)
    on_worker: dict[str, list[float]] = {"shipped": [], "registered": []}
    to_start: dict[str, list[float]] = {"shipped": [], "registered": []}

    def shipped() -> float:
        flow = load(f"{projects.pop(0)}:shipped_first")
        seconds, record = run_record(client, flow)
        check_where(record, True, "bench", workdir)
        noted(record, seconds, "shipped")
        return seconds

    def registered() -> float:
        seconds, record = run_record(client, "bench_one")
        check_where(record, False, "bench", workdir)
        noted(record, seconds, "registered")
        return seconds

    def noted(record, seconds: float, side: str) -> None:  # type: ignore[no-untyped-def]
        [node] = record.nodes
        on_worker[side].append((node.finished_at - node.started_at).total_seconds() * 1000)
        to_start[side].append((node.started_at.timestamp() - (record.finished_at.timestamp() - seconds)) * 1000)

    very_first = shipped() * 1000
    registered()
    for side in on_worker:
        on_worker[side].clear()
        to_start[side].clear()
    harness.progress(f"first calls of {repeat} new package(s), alternating with a registered flow's")
    samples = harness.interleaved({"shipped": shipped, "registered": registered}, repeat, deadline)
    ms = {side: [s * 1000 for s in values] for side, values in samples.items()}
    extra = harness.median(ms["shipped"]) - harness.median(ms["registered"])
    med = {side: {what: harness.fmt(harness.median(values[side])) for what, values in
                  (("worker", on_worker), ("start", to_start))} for side in on_worker}
    section = "shipped code (Redis)"
    return [
        Figure(section, "first call of a new package: submit → ok, one no-op node", "ms",
               harness.median(ms["shipped"]), harness.median(ms["registered"]), "registered flow",
               samples=ms["shipped"], baseline_samples=ms["registered"],
               note=f"submit → node start {med['shipped']['start']} vs {med['registered']['start']} ms; node start "
                    f"→ end on the worker (fetch, unpack, package server start and import, runner start) "
                    f"{med['shipped']['worker']} vs {med['registered']['worker']} ms; the worker's very first "
                    f"package {very_first:,.0f} ms (warm-up, not counted)"),
        Figure(section, "first call of a new package: more than a registered flow's", "ms", extra,
               target=FIRST_CALL_EXTRA_MS, note="difference of the medians above"),
    ]


def later_call_figures(client, warm: Path, workdir: Path, length: int, width: int,  # type: ignore[no-untyped-def]
                       repeat: int, deadline: float) -> list[Figure]:
    """The chain and fan-out from a package whose server is up, against the same flows registered."""
    chain = load(f"{warm}:shipped_chain")
    fanout = load(f"{warm}:shipped_fanout")
    harness.progress("warming up the package's server and the registered flows")
    for flow, shipped in ((chain, True), (chain_name(length), False), (fanout, True), (fanout_name(width), False)):
        _, record = run_record(client, flow)
        check_where(record, shipped, "bench", workdir)
    harness.progress(f"chain of {length}, fan-out of {width}, shipped and registered, {repeat} repeat(s)")
    on_worker: dict[str, list[float]] = {}

    def timed(side: str, flow) -> Callable[[], float]:  # type: ignore[no-untyped-def]
        def job() -> float:
            seconds, record = run_record(client, flow)
            # What one call takes on the worker (its node_started to its completion), this run's median.
            on_worker.setdefault(side, []).append(harness.median(
                [(n.finished_at - n.started_at).total_seconds() * 1000 for n in record.nodes]))
            return seconds
        return job

    samples = harness.interleaved({
        "shipped chain": timed("shipped chain", chain),
        "registered chain": timed("registered chain", chain_name(length)),
        "shipped fanout": timed("shipped fanout", fanout),
        "registered fanout": timed("registered fanout", fanout_name(width)),
    }, repeat, deadline)
    call_ms = {side: harness.fmt(harness.median(values)) for side, values in on_worker.items()}
    hop = {k: [s / length * 1000 for s in v] for k, v in samples.items() if "chain" in k}
    rate = {k: [width / s for s in v] for k, v in samples.items() if "fanout" in k}
    section = "shipped code (Redis)"
    note = ("package server up; each shipped call run in the runner its pool process keeps (kept.py), each "
            "registered one in the pool process; "
            "a call's node start → end on the worker {} vs {} ms; 2 worker slots")
    return [
        Figure(section, f"later calls: chain of {length} dependent no-op nodes", "ms per hop",
               harness.median(hop["shipped chain"]), harness.median(hop["registered chain"]), "registered flow",
               target=CHAIN_RATIO, samples=hop["shipped chain"], baseline_samples=hop["registered chain"],
               note=note.format(call_ms["shipped chain"], call_ms["registered chain"])),
        Figure(section, f"later calls: fan-out of {width} independent no-op nodes", "calls/s",
               harness.median(rate["shipped fanout"]), harness.median(rate["registered fanout"]), "registered flow",
               higher_is_better=True, target=FANOUT_RATIO, samples=rate["shipped fanout"],
               baseline_samples=rate["registered fanout"],
               note=note.format(call_ms["shipped fanout"], call_ms["registered fanout"])),
    ]


def gpu_start_ms(client, flow, marks: Path, workdir: Path, shipped: bool) -> float:  # type: ignore[no-untyped-def]
    """Node ``started_at`` → the node function's first line, of one GPU call, in ms."""
    mark = marks / uuid.uuid4().hex
    _, record = run_record(client, flow, {"mark": str(mark)})
    check_where(record, shipped, "gpu", workdir)
    if record.result["devices"] != "0":
        raise RuntimeError(f"{record.flow}'s node saw CUDA_VISIBLE_DEVICES={record.result['devices']!r}, granted 0")
    first_line = float(mark.read_text())
    mark.unlink()
    return (first_line - record.nodes[0].started_at.timestamp()) * 1000


def gpu_figures(client, warm: Path, workdir: Path, start_gpu_worker: Callable[[], None],  # type: ignore[no-untyped-def]
                calls: int, deadline: float) -> list[Figure]:
    harness.progress("starting the GPU worker (fake GPU id 0)")
    start_gpu_worker()
    marks = workdir / "marks"
    marks.mkdir()
    shipped = load(f"{warm}:shipped_gpu")
    first_shipped = gpu_start_ms(client, shipped, marks, workdir, True)  # the package server starts
    gpu_start_ms(client, "registered_gpu", marks, workdir, False)
    harness.progress(f"{calls} GPU calls each, alternating")
    samples = harness.interleaved({
        "shipped": lambda: gpu_start_ms(client, shipped, marks, workdir, True),
        "registered": lambda: gpu_start_ms(client, "registered_gpu", marks, workdir, False),
    }, calls, deadline)
    section = "shipped code (Redis)"
    ours, theirs = samples["shipped"], samples["registered"]
    note = (f"fake GPU id 0, no CUDA started; {len(ours)} calls each, slowest {max(ours):.1f} vs {max(theirs):.1f} "
            f"ms; the package server's first call (its start and import) {first_shipped:,.0f} ms, not counted")
    return [
        Figure(section, "GPU call: node start → function's first line, warm package server", "ms",
               harness.median(ours), harness.median(theirs), "registered flow (fork server)", samples=ours,
               baseline_samples=theirs, note=note),
        Figure(section, "GPU call: node start → function's first line, package server (target)", "ms",
               harness.median(ours), target=GPU_START_MS, samples=ours),
    ]


def measure(length: int, width: int, repeat: int, gpu_calls: int, budget_s: float) -> list[Figure]:
    import redis

    from fluksio import Settings, connect

    deadline = time.monotonic() + budget_s
    sizes = f"chain={length};fanout={width}"
    os.environ["BENCH_FLOW_SIZES"] = sizes  # the client registers the same flows as the workers
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="fluksio-bench-shipped-") as folder:
        workdir = Path(folder)
        registered_gpu = workdir / "registered_gpu.py"
        registered_gpu.write_text(REGISTERED_GPU)
        warm = write_project(workdir / "projects" / "warm",
                             WARM_FLOWS.format(chain=length, fanout=width, last=length - 1), "warm")
        flows = [str(harness.FLOWS_FILE), str(registered_gpu)]
        processes = harness.Processes(workdir)
        try:
            server = harness.RedisServer(workdir, processes).start()
            env = harness.fluksio_env(server.url(0), workdir, sizes)
            env["FLUKSIO_FLOWS"] = ",".join(flows)
            worker = [sys.executable, "-m", "fluksio.cli.main", "worker", "--accept-code", "any", "--loglevel",
                      "warning"]
            probe = redis.Redis.from_url(server.url(0))

            def start(name: str, *flags: str) -> None:
                # Each worker in an empty folder of its own: its code cache (.fluksio/code) is there, and no
                # project file is within its reach.
                (workdir / name).mkdir()
                processes.start(name, [*worker, "--name", name, *flags], env=env, cwd=workdir / name)

                def attached() -> bool:
                    processes.check_alive(name)
                    return bool(probe.exists(f"fluksio:heartbeat:{name}"))

                harness.wait_until(attached, 120, f"worker {name} attaching")
                harness.progress(f"worker {name} attached")

            start("bench", "--drivers", "--cpus", "2", "--gpus", "none")
            settings = Settings(broker_url=server.url(0), database_url=env["FLUKSIO_DATABASE_URL"],
                                artifacts_dir=Path(env["FLUKSIO_ARTIFACTS_DIR"]), flows=flows)
            with connect(settings) as client:
                figures += first_call_figures(client, workdir, repeat, deadline)
                figures += later_call_figures(client, warm, workdir, length, width, repeat, deadline)
                figures += gpu_figures(client, warm, workdir,
                                       lambda: start("gpu", "--labels", "gpu", "--cpus", "1", "--gpus", "0"),
                                       gpu_calls, deadline)
                gc.collect()
            probe.close()
        finally:
            harness.progress("stopping the installation")
            processes.stop_all()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chain", type=int, default=200, help="nodes in the chain (default 200)")
    parser.add_argument("--fanout", type=int, default=1000, help="nodes in the fan-out (default 1000)")
    parser.add_argument("--gpu-calls", type=int, default=20, help="GPU calls of each kind (default 20)")
    harness.add_common_arguments(parser, repeat=5)
    args = parser.parse_args()
    harness.isolate()
    if args.smoke:
        args.chain, args.fanout, args.repeat, args.gpu_calls = 20, 50, 1, 2
    harness.emit_figures(measure(args.chain, args.fanout, args.repeat, args.gpu_calls, args.budget_s), args.json)


if __name__ == "__main__":
    main()
