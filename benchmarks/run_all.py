"""Every benchmark, one after the other, and one combined table of figures, ratios and targets.

    .venv/bin/python benchmarks/run_all.py            # the issues' sizes: ~15 minutes on 2 cores
    .venv/bin/python benchmarks/run_all.py --full     # also whole embedded runs of 10,000 nodes, Prefect at full size
    .venv/bin/python benchmarks/run_all.py --smoke    # tiny sizes, one repeat: ~1.5 minutes (CI)

Each benchmark runs as its own process (``benchmarks/<name>.py --json …``) and starts what it needs
(redis-server on a free 127.0.0.1 port, worker processes), stopping it again even when it fails.
``--peers`` adds Dask and Prefect (``pip install 'dask[distributed]' prefect``; Prefect may live in
another virtual environment: ``--prefect-python``). ``--markdown FILE`` also writes the table,
the machine and the command as Markdown (what BENCHMARKS.md shows).

Figures are medians of ``--repeat`` runs. Targets are checked and reported, never asserted: the
exit status is non-zero only when a benchmark itself failed to run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import harness  # noqa: E402
from benchmarks.harness import Figure  # noqa: E402

HERE = Path(__file__).resolve().parent

#: Per benchmark: extra arguments in the default mode and in ``--full`` mode (``--smoke`` passes ``--smoke``).
BENCHMARKS: dict[str, dict[str, list[str]]] = {
    "celery_redis": {"default": [], "full": []},
    "embedded": {"default": [], "full": []},
    "placer": {"default": [], "full": []},
    "emissions": {"default": [], "full": []},
    "submit": {"default": [], "full": []},
    "graph_scale": {"default": [], "full": ["--end-to-end"]},
    "values": {"default": [], "full": []},
    "artifacts_store": {"default": [], "full": ["--size-mb", "2048"]},
    "code_packages": {"default": [], "full": []},
    "shipped_calls": {"default": [], "full": []},
    "explorer_api": {"default": [], "full": []},
    "cli_start": {"default": [], "full": []},
    "gpu_start": {"default": [], "full": []},
    "many_runs": {"default": [], "full": []},
    "peers": {"default": ["--prefect-chain", "40", "--prefect-fanout", "200"], "full": []},
}
#: Longest one benchmark process may run, in seconds, by mode.
LIMIT_S = {"smoke": 120, "default": 900, "full": 1800}


def run_one(name: str, mode: str, repeat: int | None, extra: list[str]) -> tuple[list[Figure], float, str | None]:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [sys.executable, str(HERE / f"{name}.py"), "--json", out.name, *extra]
        if mode == "smoke":
            command.append("--smoke")
        else:
            command += BENCHMARKS[name][mode]
            if repeat is not None:
                command += ["--repeat", str(repeat)]
        started = time.monotonic()
        print(f"::: {name}: {shlex.join(command[1:])}", file=sys.stderr, flush=True)
        try:
            result = subprocess.run(command, timeout=LIMIT_S[mode], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, text=True)
        except subprocess.TimeoutExpired:
            return [], time.monotonic() - started, f"{name} ran past {LIMIT_S[mode]} s"
        elapsed = time.monotonic() - started
        if result.returncode != 0:
            return [], elapsed, f"{name} exited with {result.returncode}"
        figures = [Figure.from_json(f) for f in json.loads(Path(out.name).read_text())]
        return figures, elapsed, None


def fill_peer_comparisons(figures: list[Figure]) -> None:
    """Put fluksio's Redis figure of the same shape beside each peer's, so the ratio says who is faster."""
    ours = {(f.section.split(" (")[0], f.unit): f for f in figures if f.section.endswith("(Redis)")}
    for figure in figures:
        if figure.section.startswith("peers: ") and figure.baseline is not None:
            match = ours.get((figure.section.removeprefix("peers: "), figure.unit))
            if match is not None:
                figure.fluksio = match.fluksio
                said = "fluksio: its Redis figure above"
                if figure.unit == "ms per hop" and figure.fluksio is not None:
                    # A chain of no-op tasks, each waiting for the one before: what one task costs the framework.
                    peer = figure.baseline_name.split(" (")[0]
                    said += (f"; per-task overhead: {peer} {harness.fmt(figure.baseline)} ms, "
                             f"fluksio {harness.fmt(figure.fluksio)} ms")
                figure.note = (figure.note + "; " if figure.note else "") + said


def markdown_report(figures: list[Figure], command: str, elapsed: dict[str, float], failures: list[str],
                    load_before: tuple[float, float, float]) -> str:
    load_after = os.getloadavg()
    lines = [
        f"Measured {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z} on {harness.machine_description()}.",
        f"fluksio: {harness.source_description()}. Versions: {harness.versions()}.",
        f"Load average (1 / 5 / 15 min) before the run: {' / '.join(f'{x:.2f}' for x in load_before)}, "
        f"after it: {' / '.join(f'{x:.2f}' for x in load_after)}.",
        "",
        "```sh",
        command,
        "```",
        "",
        harness.table(figures, markdown=True),
        "",
        "Seconds per benchmark: " + ", ".join(f"{k} {v:.0f}" for k, v in elapsed.items()) + ".",
    ]
    if failures:
        lines += ["", "Failed: " + "; ".join(failures)]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--smoke", action="store_true", help="tiny sizes, one repeat (CI)")
    mode.add_argument("--full", action="store_true", help="the issue's sizes everywhere")
    parser.add_argument("--repeat", type=int, help="repeats per figure (default: each script's, 3 for most)")
    parser.add_argument("--only", help="comma-separated benchmarks to run (default: all); "
                                       f"known: {', '.join(BENCHMARKS)}")
    parser.add_argument("--peers", action="store_true", help="also run Dask and Prefect (optional extras)")
    parser.add_argument("--prefect-python", help="the interpreter that has prefect (default: this one)")
    parser.add_argument("--markdown", metavar="FILE", help="also write the report as Markdown to FILE")
    parser.add_argument("--json", metavar="FILE", help="also write every figure as JSON to FILE")
    args = parser.parse_args()
    selected = [n.strip() for n in args.only.split(",")] if args.only else [n for n in BENCHMARKS if n != "peers"]
    if args.peers and "peers" not in selected:
        selected.append("peers")
    unknown = [n for n in selected if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
    run_mode = "smoke" if args.smoke else "full" if args.full else "default"
    command = shlex.join([os.path.relpath(sys.executable, harness.ROOT)
                          if sys.executable.startswith(str(harness.ROOT)) else sys.executable,
                          os.path.relpath(__file__, harness.ROOT), *sys.argv[1:]])
    load_before = os.getloadavg()
    load = load_before[0]
    if load > 0.5 * (os.cpu_count() or 1):
        print(f"warning: the machine is busy (load average {load:.2f} on {os.cpu_count()} cpus); "
              "figures will be noisy", file=sys.stderr)
    figures: list[Figure] = []
    elapsed: dict[str, float] = {}
    failures: list[str] = []
    for name in selected:
        extra = ["--prefect-python", args.prefect_python] if name in ("peers", "values") and args.prefect_python else []
        got, seconds, failure = run_one(name, run_mode, args.repeat, extra)
        figures += got
        elapsed[name] = seconds
        if failure:
            failures.append(failure)
            print(f"::: {failure}", file=sys.stderr)
    fill_peer_comparisons(figures)
    print()
    print(f"fluksio benchmarks ({run_mode}) on {harness.machine_description()}")
    print(f"fluksio {harness.source_description()}; {harness.versions()}")
    print(harness.table(figures))
    print("seconds per benchmark: " + ", ".join(f"{k} {v:.0f}" for k, v in elapsed.items()))
    if args.markdown:
        Path(args.markdown).write_text(markdown_report(figures, command, elapsed, failures, load_before))
    if args.json:
        Path(args.json).write_text(json.dumps({"mode": run_mode, "machine": harness.machine_description(),
                                               "figures": [f.to_json() for f in figures],
                                               "failures": failures}, indent=1))
    if failures:
        print("failed: " + "; ".join(failures), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
