"""Many runs at once: a sweep of ``--runs`` runs of a ``--nodes``-node chain submitted together, on Redis with
a real PostgreSQL run store, against raw Celery running as many chains of as many tasks on the same machine.

    .venv/bin/python benchmarks/many_runs.py [--runs 500] [--nodes 5] [--cpus 2] [--profile 20]

Starts a redis-server and a PostgreSQL (``initdb``/``pg_ctl``) on free 127.0.0.1 ports, two ``fluksio
worker --drivers-only`` processes (drivers, each with its ``FLUKSIO_DRIVER_CONCURRENCY`` threads) and two
node workers of ``--cpus`` slots (Redis database 0), and two plain ``celery worker``s of ``--cpus`` prefork
processes each (database 1). Then, alternating (``--repeat`` times, after one small warm-up of each):

* fluksio: ``client.submit`` of every run back to back (no cache), then waiting for them all; a run's
  submit-to-finish is its ``finished_at`` (written by its driver) less the moment its submit began;
* raw Celery: ``chain(noop.s() × nodes).apply_async()`` of every chain back to back, then ``get()`` on each
  chain's last result; a chain's finish is that result's ``date_done``.

Runs per second = runs / (last finish − first submit). Each side's CPU per run, in all and by part (node
workers, the client, Redis, fluksio's drivers and run store), is reported too: a sweep keeps the 2 cpus busy,
so a rate's ratio follows the ratio of what a run costs. With ``--profile SECONDS``, py-spy samples the first
driver process (``--gil``: where its CPU goes) and the second (``--idle``: where its threads wait) during the
first fluksio sweep, and prints fluksio's functions by share (benchmarks/profile_hot_path.py reads them); the
collapsed stacks are kept in ``--profile-out``.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import harness  # noqa: E402
from benchmarks.bench_flows import chain_name  # noqa: E402
from benchmarks.harness import Figure  # noqa: E402
from benchmarks.postgres_server import PostgresServer  # noqa: E402

#: The issue's target: fluksio's runs per second ≥ 0.7 × raw Celery's.
TARGET = 0.7


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def fluksio_sweep(client: Any, flow: str, runs: int) -> tuple[float, list[float]]:
    """Runs per second, and each run's seconds from submit to finish."""
    submitted: list[tuple[float, Any]] = []
    for _ in range(runs):
        began = time.time()
        submitted.append((began, client.submit(flow, no_cache=True)))
    finished = []
    for began, run in submitted:
        record = run.wait(timeout=harness.RUN_TIMEOUT_S * 4)
        if record.status.value != "ok":
            raise RuntimeError(f"run {record.id} ended {record.status.value}: {record.status_reason}")
        finished.append(record.finished_at.timestamp() - began)
    first = submitted[0][0]
    last = max(began + took for (began, _), took in zip(submitted, finished))
    return runs / (last - first), finished


def celery_sweep(app: Any, nodes: int, runs: int) -> tuple[float, list[float]]:
    from celery import chain

    submitted = []
    for _ in range(runs):
        began = time.time()
        last = chain(app.signature("rawbench.noop") for _ in range(nodes)).apply_async()
        submitted.append((began, last.id))
    finished = []
    for began, task_id in submitted:
        result = app.AsyncResult(task_id)
        result.get(timeout=harness.RUN_TIMEOUT_S * 4)
        done = result.date_done
        if isinstance(done, str):
            done = datetime.datetime.fromisoformat(done)
        if done.tzinfo is None:
            done = done.replace(tzinfo=datetime.timezone.utc)
        finished.append(done.timestamp() - began)
        result.forget()
    first = submitted[0][0]
    last = max(began + took for (began, _), took in zip(submitted, finished))
    return runs / (last - first), finished


def cpu_seconds(processes: harness.Processes) -> dict[str, float]:
    """CPU seconds (user + system) used so far by each started process with everything in its session (a node
    worker's pool, a driver's threads), by PostgreSQL's processes, and by this one (the client)."""
    tick = os.sysconf("SC_CLK_TCK")
    sessions = {process.pid: name for name, process in processes.started.items()}
    used: dict[str, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        command, fields = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()
        name = "postgres" if command.startswith("postgres") else sessions.get(int(fields[3]))
        if name is not None and int(stat.parent.name) != os.getpid():
            used[name] = used.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    times = os.times()
    used["client"] = times.user + times.system
    return used


def cpu_by_group(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds used between two readings by each group of processes (``drivers1`` and ``drivers2`` are
    ``drivers``; ``celery1`` and ``celery2``, raw Celery's workers, are ``celery``)."""
    groups: dict[str, float] = {}
    for name in after:
        group = name.rstrip("0123456789")
        groups[group] = groups.get(group, 0.0) + after[name] - before.get(name, 0.0)
    return groups


def cpu_note(groups: dict[str, float], wall_s: float) -> str:
    """``drivers 12.1 s, nodes 8.0 s …``: who used the CPU, busiest first."""
    busiest = sorted(((s, g) for g, s in groups.items() if s >= 0.05), reverse=True)
    return f"CPU over {wall_s:.1f} s: " + ", ".join(f"{g} {s:.1f} s" for s, g in busiest)


def redis_calls(server: harness.RedisServer) -> dict[str, int]:
    """Commands the Redis server has executed so far, by command (those inside Lua scripts included)."""
    import redis

    with redis.Redis.from_url(server.url()) as probe:
        return {name.removeprefix("cmdstat_"): stats["calls"] for name, stats in probe.info("commandstats").items()}


def commands_note(before: dict[str, int], after: dict[str, int], runs: int) -> str:
    delta = {name: count - before.get(name, 0) for name, count in after.items() if count > before.get(name, 0)}
    busiest = sorted(delta.items(), key=lambda item: -item[1])[:8]
    return (f"Redis commands per run {sum(delta.values()) / runs:.0f}: "
            + ", ".join(f"{name} {count / runs:.1f}" for name, count in busiest))


def store_counts(database_url: str) -> dict[str, int]:
    """The run store's transactions and rows written so far (PostgreSQL's statistics of its database)."""
    import psycopg

    with psycopg.connect(database_url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        row = conn.execute("SELECT xact_commit, tup_inserted, tup_updated, tup_deleted FROM pg_stat_database "
                           "WHERE datname = current_database()").fetchone()
    assert row is not None
    return dict(zip(("transactions", "inserted", "updated", "deleted"), map(int, row)))


def store_note(before: dict[str, int], after: dict[str, int], runs: int) -> str:
    # A backend reports its statistics at most once a second: read "after" a moment after the sweep.
    return "run store per run: " + ", ".join(f"{name} {(after[name] - before[name]) / runs:.1f}" for name in after)


def start_installation(processes: harness.Processes, workdir: Path, redis_url: str, raw_url: str,
                       database_url: str, nodes: int, cpus: int) -> dict[str, str]:
    env = harness.fluksio_env(redis_url, workdir, f"chain={nodes}")
    env["FLUKSIO_DATABASE_URL"] = database_url
    fluksio = [sys.executable, "-m", "fluksio.cli.main", "worker", "--gpus", "none", "--loglevel", "warning"]
    for index in (1, 2):
        processes.start(f"nodes{index}", [*fluksio, "--name", f"nodes{index}", "--cpus", str(cpus)], env=env,
                        cwd=workdir)
        processes.start(f"drivers{index}", [*fluksio, "--name", f"drivers{index}", "--drivers-only"], env=env,
                        cwd=workdir)
        processes.start(f"celery{index}", [sys.executable, "-m", "celery", "-A", "benchmarks.raw_celery", "worker",
                                           "--concurrency", str(cpus), "--pool", "prefork", "--loglevel", "warning",
                                           "--without-mingle", "--without-gossip", "--hostname", f"raw{index}@bench"],
                        env={**env, "RAW_CELERY_BROKER": raw_url}, cwd=harness.ROOT)
    return env


def profile_drivers(processes: harness.Processes, seconds: float, out: Path) -> list[subprocess.Popen[bytes]]:
    from benchmarks.profile_hot_path import RATE, py_spy

    spies = []
    for name, mode in (("drivers1", "--gil"), ("drivers2", "--idle")):
        pid = processes.started[name].pid
        spies.append(subprocess.Popen(
            [py_spy(), "record", mode, "--rate", str(RATE), "--format", "raw", "--duration", str(int(seconds)),
             "--output", str(out / f"{name}{mode.replace('--', '-')}.txt"), "--pid", str(pid)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(out / f"{name}.py-spy.log", "wb")))
    time.sleep(1.0)  # let py-spy attach
    return spies


def report_profiles(spies: list[subprocess.Popen[bytes]], out: Path, seconds: float) -> None:
    from benchmarks.profile_hot_path import summarize

    for spy in spies:
        try:
            spy.wait(timeout=seconds + 60)
        except subprocess.TimeoutExpired:
            spy.kill()
            spy.wait(10)
    for path in sorted(out.glob("drivers*.txt")):
        print(summarize(path, top=30), file=sys.stderr)
        print(file=sys.stderr)
    print(f"collapsed stacks in {out}", file=sys.stderr)


def measure(runs: int, nodes: int, cpus: int, repeat: int, budget_s: float, profile_s: float,
            profile_out: Path | None) -> list[Figure]:
    import redis

    from benchmarks.raw_celery import make_app
    from fluksio import Settings, connect
    from fluksio.store.db import Database

    deadline = time.monotonic() + budget_s
    postgres = PostgresServer().start()
    harness.progress(f"PostgreSQL on port {postgres.port}")
    os.environ["BENCH_FLOW_SIZES"] = f"chain={nodes}"  # the client registers the same flows as the workers
    samples: dict[str, list[tuple[float, list[float]]]] = {"fluksio": [], "celery": []}
    #: Per sweep, each side's CPU seconds by group of processes (what it costs, where the rate is CPU-bound).
    cpu: dict[str, list[dict[str, float]]] = {"fluksio": [], "celery": []}
    try:
        with tempfile.TemporaryDirectory(prefix="fluksio-bench-many-") as folder:
            workdir = Path(folder)
            processes = harness.Processes(workdir)
            try:
                server = harness.RedisServer(workdir, processes).start()
                database_url = postgres.new_database("fluksio")
                Database(database_url).upgrade()  # once, before four processes would each try
                env = start_installation(processes, workdir, server.url(0), server.url(1), database_url, nodes, cpus)
                probe = redis.Redis.from_url(server.url(0))
                harness.wait_until(lambda: all(probe.exists(f"fluksio:heartbeat:nodes{i}") for i in (1, 2)), 90,
                                   "both node workers attaching")
                probe.close()
                app = make_app(server.url(1))
                harness.wait_until(lambda: len(app.control.ping(timeout=0.5) or []) >= 2, 90,
                                   "both raw Celery workers answering")
                settings = Settings(broker_url=server.url(0), database_url=database_url,
                                    artifacts_dir=Path(env["FLUKSIO_ARTIFACTS_DIR"]), flows=[str(harness.FLOWS_FILE)])
                flow = chain_name(nodes)
                with connect(settings) as client:
                    harness.progress("warming up")
                    fluksio_sweep(client, flow, min(runs, 20))
                    celery_sweep(app, nodes, min(runs, 20))
                    out = profile_out or Path(tempfile.mkdtemp(prefix="fluksio-profile-many-"))
                    out.mkdir(parents=True, exist_ok=True)
                    for turn in range(repeat):
                        if time.monotonic() > deadline:
                            break
                        harness.progress(f"{runs} runs × {nodes} nodes, fluksio (turn {turn + 1})")
                        spies = profile_drivers(processes, profile_s, out) if profile_s and turn == 0 else []
                        before, began = cpu_seconds(processes), time.monotonic()
                        commands, written = redis_calls(server), store_counts(database_url)
                        samples["fluksio"].append(fluksio_sweep(client, flow, runs))
                        cpu["fluksio"].append(cpu_by_group(before, cpu_seconds(processes)))
                        harness.progress("fluksio: " + cpu_note(cpu["fluksio"][-1], time.monotonic() - began))
                        harness.progress("fluksio: " + commands_note(commands, redis_calls(server), runs))
                        time.sleep(1.5)
                        harness.progress("fluksio: " + store_note(written, store_counts(database_url), runs))
                        if spies:
                            report_profiles(spies, out, profile_s)
                        harness.progress(f"{runs} chains × {nodes} tasks, raw Celery (turn {turn + 1})")
                        before, began = cpu_seconds(processes), time.monotonic()
                        commands = redis_calls(server)
                        samples["celery"].append(celery_sweep(app, nodes, runs))
                        cpu["celery"].append(cpu_by_group(before, cpu_seconds(processes)))
                        harness.progress("raw Celery: " + cpu_note(cpu["celery"][-1], time.monotonic() - began))
                        harness.progress("raw Celery: " + commands_note(commands, redis_calls(server), runs))
                # Celery's results unsubscribe when collected: let that happen while Redis still answers.
                gc.collect()
                app.close()
            finally:
                processes.stop_all()
    finally:
        postgres.stop()
    return figures(samples, runs, nodes, cpus) + cpu_figures(cpu, runs)


#: Each side's processes: during one side's sweep the other's workers idle, and are not counted.
FLUKSIO_GROUPS = ("drivers", "nodes", "client", "redis", "postgres")
RAW_GROUPS = ("celery", "client", "redis")


def cpu_figures(cpu: dict[str, list[dict[str, float]]], runs: int) -> list[Figure]:
    """Each side's CPU per run (ms), in all and by part. The sweep keeps a 2-cpu host busy, so the rate
    follows what a run costs: at a ratio of CPU per run of X, the rate's ratio is about 1 / X."""
    if not cpu["fluksio"] or not cpu["celery"]:
        return []

    def per_run(side: str, groups: tuple[str, ...]) -> list[float]:
        return [1000 * sum(s for g, s in spent.items() if g in groups) / runs for spent in cpu[side]]

    section = "many runs (Redis, PostgreSQL)"
    whole_f, whole_c = per_run("fluksio", FLUKSIO_GROUPS), per_run("celery", RAW_GROUPS)
    rows = [Figure(section, "CPU per run, every process", "ms", harness.median(whole_f), harness.median(whole_c),
                   "raw Celery chains", samples=whole_f, baseline_samples=whole_c,
                   note=f"the ≥ {TARGET:g}× rate would leave fluksio {harness.median(whole_c) / TARGET:.1f} ms a run")]
    for label, groups, raw in (("node workers", ("nodes",), ("celery",)), ("the submitting client", ("client",),
                               ("client",)), ("Redis", ("redis",), ("redis",))):
        mine, theirs = per_run("fluksio", groups), per_run("celery", raw)
        rows.append(Figure(section, f"CPU per run, {label}", "ms", harness.median(mine), harness.median(theirs),
                           "raw Celery chains", samples=mine, baseline_samples=theirs))
    for label, groups in (("drivers", ("drivers",)), ("the run store (PostgreSQL)", ("postgres",))):
        mine = per_run("fluksio", groups)
        rows.append(Figure(section, f"CPU per run, {label}", "ms", harness.median(mine), samples=mine,
                           note="no counterpart in raw Celery"))
    return rows


def figures(samples: dict[str, list[tuple[float, list[float]]]], runs: int, nodes: int, cpus: int) -> list[Figure]:
    rate = {side: [r for r, _ in turns] for side, turns in samples.items()}
    tail = {side: [p95(spans) for _, spans in turns] for side, turns in samples.items()}
    note = (f"2 driver processes, 2 node workers × {cpus} slots, PostgreSQL; raw Celery: 2 workers × {cpus} "
            "prefork processes; all submitted back to back")
    return [
        Figure("many runs (Redis, PostgreSQL)", f"{runs} runs × {nodes} no-op nodes", "runs/s",
               harness.median(rate["fluksio"]), harness.median(rate["celery"]), "raw Celery chains",
               higher_is_better=True, target=TARGET, samples=rate["fluksio"], baseline_samples=rate["celery"],
               note=note),
        Figure("many runs (Redis, PostgreSQL)", f"p95 submit → finish of {runs} runs", "s",
               harness.median(tail["fluksio"]), harness.median(tail["celery"]), "raw Celery chains",
               samples=tail["fluksio"], baseline_samples=tail["celery"]),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=500, help="runs in the sweep (default 500)")
    parser.add_argument("--nodes", type=int, default=5, help="nodes of each run's chain (default 5)")
    parser.add_argument("--cpus", type=int, default=2, help="slots of each node worker (default 2)")
    parser.add_argument("--profile", type=float, default=0.0, metavar="SECONDS",
                        help="sample the driver processes with py-spy for this long during the first sweep")
    parser.add_argument("--profile-out", type=Path, help="folder for py-spy's collapsed stacks")
    harness.add_common_arguments(parser, repeat=1)
    args = parser.parse_args()
    harness.isolate()
    if args.smoke:
        args.runs, args.repeat = 20, 1
    harness.emit_figures(measure(args.runs, args.nodes, args.cpus, args.repeat, args.budget_s, args.profile,
                                 args.profile_out), args.json)


if __name__ == "__main__":
    main()
