"""How long the ``fluksio`` command takes to start: ``--help``, ``--version`` and ``runs``, against ``python -c pass``.

    .venv/bin/python benchmarks/cli_start.py [--repeat 15] [--runs 20] [--source DIR] [--against DIR]

Each figure is the wall time of one whole command in a new process, from its start to its exit, as a user
at a terminal waits for it: the interpreter's start, the imports, the work, the exit. ``fluksio runs``
lists ``--runs`` finished runs of ``examples/hello.py`` from a SQLite run store the script makes first
(embedded default, in a temporary folder). Every command runs the console script's entry point
(``fluksio.cli.main:main``) from cached bytecode, as an installed ``fluksio`` does. The commands alternate,
so drift hits all alike; the figure is the median over ``--repeat`` runs of each.

``--source DIR`` measures another checkout's ``fluksio`` (put first on ``PYTHONPATH``) with this
interpreter. ``--against DIR`` also measures a second checkout, alternating with the first, so that a
before and an after are taken under the same load: e.g. ``git worktree add /tmp/before HEAD`` before a
change, then ``--against /tmp/before``.
"""

from __future__ import annotations

import argparse
import functools
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import harness  # noqa: E402
from benchmarks.harness import Figure  # noqa: E402

#: What issue #37 asks of ``fluksio --help`` and ``fluksio runs``, in ms.
TARGET_MS = 500.0
#: The console script ``fluksio``, as an interpreter argument (its entry point, ``fluksio.cli.main:main``).
ENTRY = "import sys; from fluksio.cli.main import main; sys.exit(main())"
#: Fills the run store: ``argv[1]`` runs of the flow ``argv[2]``, through the public API of the measured tree.
FILL = ("import sys\n"
        "from fluksio import connect\n"
        "with connect() as client:\n"
        "    flow = client.flow(sys.argv[2])\n"
        "    for i in range(int(sys.argv[1])):\n"
        "        assert client.submit(flow, {'name': f'n{i}'}).wait(timeout=120).status.value == 'ok'\n")
#: The commands timed, by name: their arguments and a word their output must hold.
COMMANDS = {"fluksio --version": (["--version"], "version"), "fluksio --help": (["--help"], "Commands:"),
            "fluksio runs": (["runs"], "hello")}


def timed(command: list[str], env: dict[str, str], cwd: Path, expect: str) -> float:
    """Wall ms of one run of ``command``, which must exit 0 and print ``expect``."""
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=120)
    elapsed = (time.perf_counter() - started) * 1000
    if done.returncode != 0 or expect not in done.stdout:
        raise RuntimeError(f"{command[3:] or command} exited {done.returncode} without {expect!r}:\n"
                           f"{done.stdout[-1000:]}{done.stderr[-2000:]}")
    return elapsed


def describe(source: Path) -> str:
    """Which fluksio a checkout holds: its commit, and whether fluksio/ has changes not committed."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(source), *args], capture_output=True, text=True,
                              timeout=30).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "?"
    return f"`{commit}`" + (" with uncommitted changes" if git("status", "--porcelain", "--", "fluksio") else "")


def prepare(source: Path, root: Path, runs: int) -> dict[str, Callable[[], float]]:
    """The timed commands of the fluksio in ``source``, each against its own run store in ``root``, filled by
    that same fluksio with ``runs`` runs of the hello flow."""
    root.mkdir()
    env = harness.child_env(FLUKSIO_DATABASE_URL=f"sqlite:///{root / 'fluksio.db'}",
                            FLUKSIO_ARTIFACTS_DIR=str(root / "artifacts"),
                            FLUKSIO_CONFIG=str(root / "no-such.toml"), COLUMNS="120")
    env["PYTHONPATH"] = str(source)  # the measured tree alone, whichever checkout this script is in
    # As an installed package starts: from its cached bytecode (the unmeasured first runs below write it).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    imported = subprocess.run([sys.executable, "-c", "import fluksio; print(fluksio.__file__)"], env=env, cwd=root,
                              capture_output=True, text=True, timeout=60).stdout.strip()
    if not imported.startswith(str(source)):
        raise RuntimeError(f"PYTHONPATH={source} imported fluksio from {imported or 'nowhere'}")
    harness.progress(f"{source}: filling its run store with {runs} run(s) of examples/hello.py")
    filled = subprocess.run([sys.executable, "-c", FILL, str(runs), f"{source / 'examples' / 'hello.py'}:flow"],
                            env=env, cwd=root, capture_output=True, text=True, timeout=600)
    if filled.returncode != 0:
        raise RuntimeError(f"filling the run store failed:\n{filled.stderr[-2000:]}")
    fluksio = [sys.executable, "-c", ENTRY]
    jobs: dict[str, Callable[[], float]] = {name: functools.partial(timed, [*fluksio, *args], env, root, expect)
                                            for name, (args, expect) in COMMANDS.items()}
    for job in jobs.values():  # once each unmeasured: bytecode written, files in the page cache
        job()
    return jobs


def measure(sources: list[Path], runs: int, repeat: int, budget_s: float) -> list[Figure]:
    with tempfile.TemporaryDirectory(prefix="fluksio-bench-cli-") as workdir:
        jobs: dict[str, Callable[[], float]] = {
            "python -c pass": functools.partial(timed, [sys.executable, "-c", "pass"], harness.child_env(),
                                                Path(workdir), "")}
        for index, source in enumerate(sources):
            prepared = prepare(source, Path(workdir) / str(index), runs)
            jobs.update({f"{index} {name}": job for name, job in prepared.items()})
        samples = harness.interleaved(jobs, repeat, time.monotonic() + budget_s)
        interpreter = harness.median(samples["python -c pass"])
        figures = [Figure("CLI start", "python -c pass (the interpreter alone)", "ms", interpreter,
                          samples=samples["python -c pass"], note="for scale: what no command can go below")]
        labels = {"fluksio --version": "fluksio --version", "fluksio --help": "fluksio --help",
                  "fluksio runs": f"fluksio runs ({runs} runs in a SQLite store, embedded default)"}
        for index, source in enumerate(sources):
            section = "CLI start" if index == 0 else f"CLI start, {describe(source)}"
            for name, label in labels.items():
                taken = samples[f"{index} {name}"]
                figure = harness.median(taken)
                harness.progress(f"{source}: {name}: median {figure:.0f} ms over {len(taken)}")
                figures.append(Figure(section, label, "ms", figure, samples=taken,
                                      target=None if name == "fluksio --version" else TARGET_MS,
                                      note=f"{describe(source)}; {figure - interpreter:.0f} ms more than the "
                                           "interpreter alone"))
        return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20, help="runs in the store `fluksio runs` lists (default 20)")
    parser.add_argument("--source", type=Path, default=harness.ROOT,
                        help="the checkout whose fluksio to measure (default: this one)")
    parser.add_argument("--against", type=Path, metavar="DIR",
                        help="also measure the fluksio of this checkout, alternating with --source's")
    harness.add_common_arguments(parser, repeat=15)
    args = parser.parse_args()
    harness.isolate()
    if args.smoke:
        args.runs, args.repeat = 2, 2
    sources = [args.source] + ([args.against] if args.against else [])
    for source in sources:
        if not (source / "fluksio" / "cli" / "main.py").is_file():
            parser.error(f"{source} is not a fluksio checkout (no fluksio/cli/main.py in it)")
    harness.emit_figures(measure([s.resolve() for s in sources], args.runs, args.repeat, args.budget_s), args.json)


if __name__ == "__main__":
    main()
