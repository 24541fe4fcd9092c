"""What every benchmark shares: servers it starts, repeats and medians, and one table of figures.

Every server and process a benchmark starts is bound to 127.0.0.1, started in
its own process group, and stopped in a ``finally`` (or by :class:`Processes`
on exit), so an interrupted benchmark leaves nothing running.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: The repository root: scripts put it on ``sys.path`` so ``fluksio`` and ``benchmarks`` import.
ROOT = Path(__file__).resolve().parents[1]
#: The flows that benchmark workers register (``FLUKSIO_FLOWS``).
FLOWS_FILE = Path(__file__).with_name("bench_flows.py")
#: Longest any one benchmark run may take before it is abandoned, in seconds.
RUN_TIMEOUT_S = 300.0


# -- figures -----------------------------------------------------------------------------------


@dataclass
class Figure:
    """One line of the table: fluksio's figure, the baseline's, and their ratio against a target.

    ``higher_is_better`` says which way the ratio (fluksio / baseline) should go; ``target`` is the
    ratio the issue asks for (``≤ target`` when lower is better, ``≥ target`` otherwise), or, with
    no baseline, the bound on fluksio's own figure.
    """

    section: str
    metric: str
    unit: str
    fluksio: float | None
    baseline: float | None = None
    baseline_name: str = ""
    higher_is_better: bool = False
    target: float | None = None
    note: str = ""
    samples: list[float] = field(default_factory=list)
    baseline_samples: list[float] = field(default_factory=list)

    @property
    def ratio(self) -> float | None:
        if self.fluksio is None or not self.baseline:
            return None
        return self.fluksio / self.baseline

    @property
    def met(self) -> bool | None:
        if self.target is None:
            return None
        value = self.ratio if self.baseline is not None else self.fluksio
        if value is None:
            return None
        return value >= self.target if self.higher_is_better else value <= self.target

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio, "met": self.met}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Figure:
        data = {k: v for k, v in data.items() if k not in ("ratio", "met")}
        return cls(**data)


def fmt(value: float | None) -> str:
    if value is None:
        return "—"
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def target_text(figure: Figure) -> str:
    if figure.target is None:
        return ""
    sign = "≥" if figure.higher_is_better else "≤"
    what = f"{figure.target:g}×" if figure.baseline is not None else f"{figure.target:g} {figure.unit}"
    verdict = {True: "met", False: "MISSED", None: "?"}[figure.met]
    return f"{sign} {what}: {verdict}"


def spread(samples: Sequence[float]) -> str:
    """``3: 3.51–3.92``: how many runs, and the smallest and largest figure among them."""
    return f"{len(samples)}: {fmt(min(samples))}–{fmt(max(samples))}"


def table(figures: Sequence[Figure], markdown: bool = False) -> str:
    """One table of figures, ratios and targets (plain text, or a Markdown table)."""
    header = ["section", "metric", "fluksio", "baseline", "vs", "ratio", "target", "note"]
    rows = [[f.section, f"{f.metric} ({f.unit})", fmt(f.fluksio), fmt(f.baseline), f.baseline_name,
             f"{f.ratio:.2f}×" if f.ratio is not None else "", target_text(f), f.note] for f in figures]
    if markdown:
        header.insert(7, "runs (fluksio; baseline)")
        for row, f in zip(rows, figures):
            cells = [spread(s) if len(s) > 1 else "—" for s in (f.samples, f.baseline_samples)]
            row.insert(7, "" if cells == ["—", "—"] else "; ".join(cells))
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    numeric = {2, 3, 5}
    out = []
    for row in [header, ["-" * w for w in widths], *rows]:
        out.append("  ".join(str(c).rjust(w) if i in numeric else str(c).ljust(w)
                             for i, (c, w) in enumerate(zip(row, widths))).rstrip())
    return "\n".join(out)


def emit_figures(figures: Sequence[Figure], json_path: str | None) -> None:
    """Print the script's table; with ``--json PATH`` also write its figures there for ``run_all``."""
    print(table(figures))
    if json_path:
        Path(json_path).write_text(json.dumps([f.to_json() for f in figures], indent=1))


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def machine_description() -> str:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory = ""
    with contextlib.suppress(OSError, ValueError, IndexError):
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f", {kb / 1024 / 1024:.0f} GiB RAM"
    return (f"{os.cpu_count()} cpu(s) ({cpu}){memory}, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")


def source_description() -> str:
    """Which fluksio was measured: the commit of this checkout (``+dirty`` if fluksio/ has edits)."""
    label = os.environ.get("BENCH_SOURCE")
    if label:
        return label
    if not (ROOT / ".git").exists():
        return "unknown (not a git checkout; set BENCH_SOURCE)"
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "fluksio"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"commit {commit}" + (" with uncommitted changes under fluksio/" if dirty else "")


def child_env(**extra: str) -> dict[str, str]:
    """This environment without FLUKSIO_* settings, with this checkout first on the import path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLUKSIO_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env.update(extra)
    return env


def child_result(script: str, arguments: Sequence[str], timeout_s: float, **env: str) -> Any:
    """Run ``script`` in a fresh interpreter with ``arguments`` and ``--child-out FILE``; the JSON it wrote there.

    A fresh process per measurement keeps one side's threads and imports out of the other's figures;
    ``FLUKSIO_CONFIG`` names no file, so a ``fluksio.toml`` of the caller's stays out too.
    """
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([sys.executable, script, *arguments, "--child-out", out.name],
                       env=child_env(FLUKSIO_CONFIG=out.name + ".no-such.toml", **env), check=True,
                       timeout=timeout_s, stdin=subprocess.DEVNULL)
        return json.loads(Path(out.name).read_text())


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    parts = []
    for package in ("celery", "kombu", "redis", "SQLAlchemy", "pydantic"):
        with contextlib.suppress(PackageNotFoundError):
            parts.append(f"{package} {version(package)}")
    redis_server = shutil.which("redis-server")
    if redis_server:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([redis_server, "--version"], capture_output=True, text=True, timeout=10).stdout
            parts.append("redis-server " + next((w[2:] for w in out.split() if w.startswith("v=")), "?"))
    return ", ".join(parts)


# -- processes and servers -----------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(check: Callable[[], bool], timeout: float, what: str, poll: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(poll)
    raise TimeoutError(f"{what} did not happen within {timeout:g} s")


class Processes:
    """Processes this benchmark started, each in its own session: all stopped by :meth:`stop_all`."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self.started: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, command: list[str], env: dict[str, str] | None = None,
              cwd: Path | None = None) -> subprocess.Popen[bytes]:
        log = open(self.logdir / f"{name}.log", "ab")  # noqa: SIM115 - kept open for the process
        process = subprocess.Popen(command, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        self.started[name] = process
        return process

    def log_of(self, name: str) -> str:
        path = self.logdir / f"{name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else "(no log)"

    def check_alive(self, name: str) -> None:
        process = self.started[name]
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode}: {self.log_of(name)}")

    def stop_all(self, grace_s: float = 15.0) -> None:
        """Newest first (workers before the Redis they detach from): SIGTERM each process group, then
        SIGKILL whatever is still there after ``grace_s``."""
        for name, process in reversed(list(self.started.items())):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(grace_s)
            except subprocess.TimeoutExpired:
                print(f"  ({name} still running {grace_s:g} s after SIGTERM: killed)", file=sys.stderr)
            # Children of the process (a prefork pool, a drivers process) may outlive it: kill the group.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(5)
        self.started.clear()


class RedisServer:
    """A throwaway redis-server on a free 127.0.0.1 port, no persistence."""

    def __init__(self, workdir: Path, processes: Processes) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.processes = processes

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> RedisServer:
        binary = shutil.which("redis-server") or "/usr/sbin/redis-server"
        if not Path(binary).exists():
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.processes.start("redis", [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                       "--appendonly", "no", "--dir", str(self.workdir)])

        def answers() -> bool:
            self.processes.check_alive("redis")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                    sock.sendall(b"PING\r\n")
                    return sock.recv(16).startswith(b"+PONG")
            except OSError:
                return False

        wait_until(answers, 10, f"redis-server answering on port {self.port}")
        return self


def fluksio_env(broker_url: str, workdir: Path, flow_sizes: str) -> dict[str, str]:
    """The environment of a fluksio worker (or ``fluksio run``) of a benchmark installation."""
    env = child_env()
    env.update({
        "FLUKSIO_BROKER_URL": broker_url,
        "FLUKSIO_DATABASE_URL": f"sqlite:///{workdir / 'fluksio.db'}",
        "FLUKSIO_ARTIFACTS_DIR": str(workdir / "artifacts"),
        "FLUKSIO_FLOWS": str(FLOWS_FILE),
        "FLUKSIO_CONFIG": str(workdir / "no-such-fluksio.toml"),
        "BENCH_FLOW_SIZES": flow_sizes,
    })
    return env


@contextlib.contextmanager
def redis_installation(workdir: Path, cpus: int, flow_sizes: str, raw_celery: bool = True,
                       ) -> Iterator[dict[str, Any]]:
    """A real redis-server, one ``fluksio worker --drivers`` with ``cpus`` slots and, beside it, a plain
    ``celery worker`` with the same concurrency on another Redis database of the same server.

    Yields ``{"fluksio": Settings, "raw_app": Celery | None, "processes": Processes}``.
    """
    import redis

    from fluksio import Settings

    os.environ["BENCH_FLOW_SIZES"] = flow_sizes  # the client registers the same flows as the workers
    processes = Processes(workdir)
    try:
        server = RedisServer(workdir, processes).start()
        env = fluksio_env(server.url(0), workdir, flow_sizes)
        processes.start("fluksio-worker", [sys.executable, "-m", "fluksio.cli.main", "worker", "--name", "bench",
                                           "--cpus", str(cpus), "--gpus", "none", "--drivers",
                                           "--loglevel", "warning"], env=env, cwd=workdir)
        raw_app = None
        if raw_celery:
            raw_env = {**env, "RAW_CELERY_BROKER": server.url(1)}
            processes.start("celery-worker", [sys.executable, "-m", "celery", "-A", "benchmarks.raw_celery", "worker",
                                              "--concurrency", str(cpus), "--pool", "prefork", "--loglevel", "warning",
                                              "--without-mingle", "--without-gossip", "--hostname", "raw@bench"],
                            env=raw_env, cwd=ROOT)
            from benchmarks.raw_celery import make_app

            raw_app = make_app(server.url(1))
        client = redis.Redis.from_url(server.url(0))

        def attached() -> bool:
            processes.check_alive("fluksio-worker")
            return bool(client.exists("fluksio:heartbeat:bench"))

        wait_until(attached, 60, "the fluksio worker attaching")
        progress("fluksio worker attached")
        settings = Settings(broker_url=server.url(0), database_url=env["FLUKSIO_DATABASE_URL"],
                            artifacts_dir=Path(env["FLUKSIO_ARTIFACTS_DIR"]), flows=[str(FLOWS_FILE)])
        if raw_app is not None:
            def raw_answers() -> bool:
                processes.check_alive("celery-worker")
                return bool(raw_app.control.ping(timeout=0.5))

            wait_until(raw_answers, 60, "the raw Celery worker answering")
            progress("raw Celery worker answers")
        yield {"fluksio": settings, "raw_app": raw_app, "processes": processes, "redis": server}
    finally:
        progress("stopping the installation")
        processes.stop_all()
        progress("stopped")


def interleaved(jobs: dict[str, Callable[[], float]], repeat: int, deadline: float) -> dict[str, list[float]]:
    """Run each job ``repeat`` times, alternating between them so drift hits all alike; stop at ``deadline``."""
    samples: dict[str, list[float]] = {name: [] for name in jobs}
    for _ in range(repeat):
        for name, job in jobs.items():
            if time.monotonic() > deadline:
                print(f"  (time budget spent: stopping after {len(samples[name])} sample(s) of {name})",
                      file=sys.stderr)
                return samples
            samples[name].append(job())
    return samples


def isolate() -> None:
    """Keep the caller's fluksio settings (``FLUKSIO_*``, a ``fluksio.toml`` here) out of the benchmark."""
    for key in [k for k in os.environ if k.startswith("FLUKSIO_")]:
        del os.environ[key]
    os.environ["FLUKSIO_CONFIG"] = os.path.join(tempfile.gettempdir(), "fluksio-bench-no-such-config.toml")


def add_common_arguments(parser: Any, repeat: int = 3) -> None:
    parser.add_argument("--repeat", type=int, default=repeat, help="repeats per figure; the median is reported")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one repeat: checks the script works")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON (for run_all.py)")
    parser.add_argument("--budget-s", type=float, default=600.0,
                        help="stop repeating once this many seconds have passed (default 600)")


_STARTED = time.monotonic()


def progress(message: str) -> None:
    print(f"  … {time.monotonic() - _STARTED:5.1f}s {message}", file=sys.stderr, flush=True)
