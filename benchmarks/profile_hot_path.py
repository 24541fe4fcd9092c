"""Where a hop goes: sample fluksio's hot path with py-spy and rank the functions that take the time.

    .venv/bin/pip install py-spy                 # not a dependency of fluksio; for this script only
    .venv/bin/python benchmarks/profile_hot_path.py [--seconds 20] [--out DIR] [WORKLOAD ...]

Workloads (default: all of them):

* ``embedded-chain`` / ``embedded-fanout``: runs of ``bench_chain_200`` / ``bench_fanout_1000`` on the
  embedded default, back to back, in a child process sampled by ``py-spy record``;
* ``redis-chain``: chains on a real Redis installation (``fluksio worker --drivers``), sampling the
  worker, its prefork pool and its drivers process together (``--subprocesses``).

Only the thread holding the GIL is sampled (``py-spy --gil``), so the percentages are shares of
the Python CPU time of the sampled processes, not of the wall time: time a hop spends waiting (for
a message, on a lock, between the client's status polls) shows up in the benchmarks, not here. For
each workload this prints the fluksio functions with the largest inclusive share, and the share of
each package at the top of the stack (self time). The raw collapsed stacks are kept in ``--out``.
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import harness  # noqa: E402

WORKLOADS = ["embedded-chain", "embedded-fanout", "redis-chain"]
DEFAULT_WORKLOADS = WORKLOADS
#: Samples per second asked of py-spy.
RATE = 200
FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(found).exists():
        raise SystemExit("py-spy is not installed: .venv/bin/pip install py-spy")
    return found


# -- what the sampled processes run --------------------------------------------------------------


def run_embedded(shape: str, seconds: float) -> None:
    from benchmarks.bench_flows import chain, fanout
    from fluksio import Settings, connect

    flow = chain(200) if shape == "chain" else fanout(1000)
    with tempfile.TemporaryDirectory(prefix="fluksio-profile-") as workdir:
        settings = Settings(broker_url="memory://", database_url=f"sqlite:///{workdir}/fluksio.db",
                            artifacts_dir=Path(workdir) / "artifacts", cpus=2)
        with connect(settings) as client:
            deadline = time.monotonic() + seconds
            runs = 0
            while time.monotonic() < deadline and runs < 10_000:
                record = client.submit(flow, {}, no_cache=True).wait(timeout=harness.RUN_TIMEOUT_S)
                assert record.status.value == "ok", record.status_reason
                runs += 1
            print(f"{runs} run(s) of {flow.name}", file=sys.stderr)


def profile_embedded(workload: str, seconds: float, out: Path) -> Path:
    shape = "chain" if "chain" in workload else "fanout"
    target = out / f"{workload}.txt"
    command = [py_spy(), "record", "--gil", "--rate", str(RATE), "--format", "raw", "--output", str(target), "--",
               sys.executable, __file__, "--run", shape, "--seconds", str(seconds)]
    subprocess.run(command, check=True, timeout=seconds * 3 + 120, env=harness.child_env(),
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    return target


def profile_redis_chain(seconds: float, out: Path) -> Path:
    from fluksio import connect

    target = out / "redis-chain.txt"
    with tempfile.TemporaryDirectory(prefix="fluksio-profile-") as workdir, \
            harness.redis_installation(Path(workdir), 2, "chain=200", raw_celery=False) as installation, \
            connect(installation["fluksio"]) as client:
        client.submit("bench_chain_200", {}, no_cache=True).wait(timeout=120)  # warm-up
        worker = installation["processes"].started["fluksio-worker"]
        spy = subprocess.Popen([py_spy(), "record", "--gil", "--rate", str(RATE), "--format", "raw", "--subprocesses",
                                "--duration", str(int(seconds)), "--output", str(target), "--pid", str(worker.pid)],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            time.sleep(1.0)  # let py-spy attach
            deadline = time.monotonic() + seconds - 1.5
            runs = 0
            while time.monotonic() < deadline and runs < 10_000:
                client.submit("bench_chain_200", {}, no_cache=True).wait(timeout=120)
                runs += 1
            spy.wait(timeout=seconds + 60)
        finally:
            if spy.poll() is None:
                spy.kill()
                spy.wait(10)
        if spy.returncode != 0:
            said = spy.stderr.read().decode(errors="replace")[-800:] if spy.stderr else ""
            raise RuntimeError(f"py-spy failed: {said}")
        print(f"  {runs} run(s) of bench_chain_200 while sampling", file=sys.stderr)
    return target


# -- reading the samples -------------------------------------------------------------------------


def package_of(file: str) -> str:
    """``fluksio``, ``celery``, ``sqlalchemy`` …, or ``stdlib``: py-spy shortens paths to the package."""
    file = file.split("site-packages/", 1)[-1]
    if "/" not in file:
        return "stdlib" if file.endswith(".py") or file.startswith("<") else file
    head = file.split("/", 1)[0]
    return "stdlib" if head.startswith("python3") or head in ("concurrent", "json", "sqlite3", "logging",
                                                              "importlib", "email", "collections") else head


def fluksio_key(file: str, function: str) -> str | None:
    file = file.split("site-packages/", 1)[-1]
    if file.startswith("fluksio/") or "/fluksio/" in file:
        return "fluksio/" + file.split("fluksio/", 1)[1] + ":" + function
    return None


def summarize(path: Path, top: int = 25) -> str:
    inclusive: collections.Counter[str] = collections.Counter()
    self_by_package: collections.Counter[str] = collections.Counter()
    self_by_function: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = [FRAME.match(f) for f in stack.split(";")]
        seen: set[str] = set()
        leaf = None
        for match in frames:
            if match is None:
                continue
            leaf = match
            key = fluksio_key(match["file"], match["function"])
            if key is not None:
                if key not in seen:
                    seen.add(key)
                    inclusive[key] += count
        if leaf is not None:
            self_by_package[package_of(leaf["file"])] += count
            self_by_function[f"{leaf['file'].split('site-packages/', 1)[-1]}:{leaf['function']}"] += count
    if not total:
        return f"{path.name}: no samples"
    lines = [f"{path.stem}: {total} samples of the GIL holder ({total / RATE:.1f} s holding it)",
             "  fluksio functions, inclusive share of CPU samples:"]
    lines += [f"    {n / total:6.1%}  {key}" for key, n in inclusive.most_common(top)]
    lines.append("  self time by package (the frame at the top of the stack):")
    lines += [f"    {n / total:6.1%}  {package}" for package, n in self_by_package.most_common(12)]
    lines.append("  self time by function (any package):")
    lines += [f"    {n / total:6.1%}  {function}" for function, n in self_by_function.most_common(15)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="*", choices=[*WORKLOADS, []], metavar="WORKLOAD",
                        help=f"any of {', '.join(WORKLOADS)} (default: {', '.join(DEFAULT_WORKLOADS)})")
    parser.add_argument("--seconds", type=float, default=20.0, help="sampling time per workload (default 20)")
    parser.add_argument("--out", type=Path, help="folder for the collapsed stacks (default: a new temporary one)")
    parser.add_argument("--top", type=int, default=25, help="fluksio functions listed per workload")
    parser.add_argument("--run", choices=["chain", "fanout"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    harness.isolate()
    if args.run:
        run_embedded(args.run, args.seconds)
        return
    out = args.out or Path(tempfile.mkdtemp(prefix="fluksio-profile-"))
    out.mkdir(parents=True, exist_ok=True)
    for workload in args.workloads or DEFAULT_WORKLOADS:
        harness.progress(f"sampling {workload} for {args.seconds:g} s")
        path = (profile_redis_chain(args.seconds, out) if workload == "redis-chain"
                else profile_embedded(workload, args.seconds, out))
        print(summarize(path, args.top))
        print()
    print(f"collapsed stacks in {out} (speedscope.app or flamegraph.pl read them)")


if __name__ == "__main__":
    main()
