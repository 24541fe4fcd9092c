"""First contact, as a new user meets it: a misconfigured installation says so in one line, at once.

Real servers and real processes: the `fluksio` command against a closed port, a redis-server that
requires a password, an unknown host, a silent port, a missing database driver and an unknown
scheme; then every command of the CLI walked with a wrong broker, a wrong store and a missing
driver, in parallel processes so the walk takes seconds, not minutes.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from fluksio import connect
from fluksio.cli.main import cli
from fluksio.constants import EVENTS_CHANNEL, HEARTBEAT_KEY
from fluksio.errors import BrokerUnavailable, ConfigError, StoreUnavailable
from fluksio.outage import LOGGER
from fluksio.runtime import check_installation
from fluksio.settings import Settings
from tests.integration.support.servers import RedisServer, free_port

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
HELLO = str(REPO / "examples" / "hello.py")
FLUKSIO = [sys.executable, "-m", "fluksio.cli.main"]
#: The password every misconfigured URL carries: it must never reach the terminal.
SECRET = "hunter2-secret"
#: How long a command may take to say what is wrong, in seconds.
AT_ONCE_S = 15.0


@dataclass
class Said:
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    #: Still running when stopped (a server that does not need what is wrong, a worker waiting for its broker).
    stopped: bool = False
    lines: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.lines = [line for line in self.stderr.splitlines() if line.strip()]


def base_env(tmp_path: Path, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLUKSIO_")}
    env.update({"COLUMNS": "200", "FLUKSIO_CONFIG": str(tmp_path / "no-fluksio.toml"),
                "FLUKSIO_DATABASE_URL": f"sqlite:///{tmp_path / 'runs.db'}",
                "FLUKSIO_ARTIFACTS_DIR": str(tmp_path / "artifacts")})
    env.update({f"FLUKSIO_{k.upper()}": v for k, v in settings.items()})
    return env


def fluksio(args: list[str], env: dict[str, str], cwd: Path, until: str | None = None,
            limit_s: float = 60.0) -> Said:
    """Run `fluksio ARGS`. With ``until``, a command that keeps running is stopped once its stderr has that
    text (or after ``limit_s``); otherwise it must end by itself within ``limit_s``."""
    start = time.monotonic()
    process = subprocess.Popen([*FLUKSIO, *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    if until is None:
        try:
            out, err = process.communicate(timeout=limit_s)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
            return Said(None, out, err, time.monotonic() - start, stopped=True)
        return Said(process.returncode, out, err, time.monotonic() - start)
    return _until(process, until, start, limit_s)


def _until(process: subprocess.Popen[str], text: str, start: float, limit_s: float) -> Said:
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    err: list[str] = []
    seen_at = None
    while time.monotonic() - start < limit_s:
        try:
            line = lines.get(timeout=max(0.01, limit_s - (time.monotonic() - start)))
        except queue.Empty:
            break
        if line is None:
            break
        err.append(line)
        if text in line:
            seen_at = time.monotonic() - start
            break
    stopped = process.poll() is None
    process.terminate()
    try:
        out, _ = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        out, _ = process.communicate()
    while (line := lines.get(timeout=5)) is not None:
        err.append(line)
    return Said(process.returncode if not stopped else None, out, "".join(err),
                seen_at if seen_at is not None else time.monotonic() - start, stopped=stopped)


def assert_one_line_at_once(said: Said, *expected: str) -> str:
    """The command failed within AT_ONCE_S, saying one line with ``expected`` in it, no traceback, no password."""
    assert said.returncode not in (0, None), said
    assert said.seconds < AT_ONCE_S, said
    assert "Traceback" not in said.stderr, said.stderr
    assert SECRET not in said.stderr + said.stdout
    assert len(said.lines) == 1, said.stderr
    for text in expected:
        assert text in said.lines[0], said.lines[0]
    return said.lines[0]


# -- servers ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def locked_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A redis-server that requires a password (``--requirepass``)."""
    server = RedisServer(tmp_path_factory.mktemp("locked-redis"), password="the-right-one").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def silent_port() -> Iterator[int]:
    """A port whose listener takes connections and never says a word (a wedged server, a wrong service)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)  # the kernel completes the handshakes; nobody ever reads
        yield listener.getsockname()[1]


@pytest.fixture(scope="module")
def closed_port() -> int:
    return free_port()


# -- one line, at once ------------------------------------------------------------------------------------------


def test_a_closed_broker_port_is_refused_in_one_line(tmp_path: Path, closed_port: int) -> None:
    env = base_env(tmp_path, broker_url=f"redis://:{SECRET}@127.0.0.1:{closed_port}/0")
    said = fluksio(["run", HELLO, "-p", "name=ada"], env, tmp_path)
    assert_one_line_at_once(said, f"cannot reach the broker redis://:***@127.0.0.1:{closed_port}/0",
                            "connection refused", "is redis-server running there?")


def test_a_refused_redis_password_says_authentication_failed(tmp_path: Path, locked_redis: RedisServer) -> None:
    wrong = f"redis://:{SECRET}@127.0.0.1:{locked_redis.port}/0"
    said = fluksio(["run", HELLO, "-p", "name=ada"], base_env(tmp_path, broker_url=wrong), tmp_path)
    assert_one_line_at_once(said, f"redis://:***@127.0.0.1:{locked_redis.port}/0", "authentication failed",
                            "check the user and password in the URL")
    none_given = f"redis://127.0.0.1:{locked_redis.port}/0"
    said = fluksio(["runs"], base_env(tmp_path, broker_url=none_given), tmp_path)
    assert_one_line_at_once(said, "asks for a password and the URL gives none",
                            f"redis://:PASSWORD@127.0.0.1:{locked_redis.port}/0")


def test_an_unknown_broker_host_is_named(tmp_path: Path) -> None:
    env = base_env(tmp_path, broker_url=f"redis://:{SECRET}@no-such-host.invalid:6379/0")
    said = fluksio(["sweep", HELLO, "-g", "name=a,b"], env, tmp_path)
    assert_one_line_at_once(said, "redis://:***@no-such-host.invalid:6379/0",
                            "unknown host 'no-such-host.invalid'", "check the host name")


def test_a_broker_that_never_answers_times_out_within_seconds(tmp_path: Path, silent_port: int) -> None:
    said = fluksio(["placer"], base_env(tmp_path, broker_url=f"redis://127.0.0.1:{silent_port}/0"), tmp_path)
    assert_one_line_at_once(said, f"no answer from 127.0.0.1:{silent_port} within 3 s")


def test_a_missing_database_driver_names_the_package_and_the_tested_dialects(tmp_path: Path) -> None:
    env = base_env(tmp_path, database_url=f"mysql://fluksio:{SECRET}@127.0.0.1/runs")
    said = fluksio(["runs"], env, tmp_path)
    assert_one_line_at_once(said, "mysql://fluksio:***@127.0.0.1/runs", "pip install mysqlclient",
                            "tested on SQLite (sqlite:///PATH) and PostgreSQL (postgresql+psycopg://USER@HOST/DB, "
                            "pip install 'fluksio[postgres]')")


def test_an_unknown_store_scheme_names_the_supported_ones(tmp_path: Path) -> None:
    env = base_env(tmp_path, database_url=f"nosuchdb://fluksio:{SECRET}@127.0.0.1/runs")
    said = fluksio(["show", "01J0000000"], env, tmp_path)
    assert_one_line_at_once(said, "unknown scheme 'nosuchdb'", "SQLite (sqlite:///PATH)", "PostgreSQL")


def test_a_store_server_refused_or_silent_is_said_in_one_line(tmp_path: Path, closed_port: int,
                                                              silent_port: int) -> None:
    refused = f"postgresql+psycopg://fluksio:{SECRET}@127.0.0.1:{closed_port}/runs"
    said = fluksio(["runs"], base_env(tmp_path, database_url=refused), tmp_path)
    assert_one_line_at_once(said, f"cannot open the run store postgresql+psycopg://fluksio:***@127.0.0.1:"
                            f"{closed_port}/runs", "connection refused")
    silent = f"postgresql+psycopg://fluksio@127.0.0.1:{silent_port}/runs"
    said = fluksio(["runs"], base_env(tmp_path, database_url=silent), tmp_path)
    assert_one_line_at_once(said, f"no answer from 127.0.0.1:{silent_port}")


def test_connect_fails_fast_with_the_same_sentence(tmp_path: Path, closed_port: int) -> None:
    start = time.monotonic()
    with pytest.raises(BrokerUnavailable, match=f"cannot reach the broker redis://:\\*\\*\\*@127.0.0.1:{closed_port}"):
        connect(Settings(broker_url=f"redis://:{SECRET}@127.0.0.1:{closed_port}/0",
                         database_url=f"sqlite:///{tmp_path / 'runs.db'}", broker_outage_s=60))
    with pytest.raises(StoreUnavailable, match="connection refused"):
        connect(Settings(database_url=f"postgresql+psycopg://u@127.0.0.1:{closed_port}/runs"))
    assert time.monotonic() - start < AT_ONCE_S


def test_check_installation_is_the_same_check_for_a_front_door_of_its_own(
        tmp_path: Path, redis_server: RedisServer, closed_port: int) -> None:
    """What `fluksio ui` (or any dashboard) calls before it serves: broker and store, one line each."""
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    check_installation(Settings(broker_url=redis_server.url, database_url=store))
    check_installation(Settings(database_url=store))  # embedded: no broker to reach
    with pytest.raises(BrokerUnavailable, match="connection refused"):
        check_installation(Settings(broker_url=f"redis://127.0.0.1:{closed_port}/0", database_url=store))
    with pytest.raises(ConfigError, match="pip install mysqlclient"):
        check_installation(Settings(broker_url=redis_server.url, database_url="mysql://u@h/runs"))


# -- the terminal ------------------------------------------------------------------------------------------------


def test_runs_at_80_columns_keeps_id_flow_status_created_and_duration_and_elides_params(
        tmp_path: Path, forget_imported_flow_files: None) -> None:
    env = base_env(tmp_path)
    long_name = "ada-" + "x" * 60
    with connect(Settings(database_url=env["FLUKSIO_DATABASE_URL"], artifacts_dir=tmp_path / "artifacts",
                          cpus=1)) as client:
        for name in (long_name, "bob"):
            assert client.submit(HELLO, {"name": name}).wait(timeout=60).status.value == "ok"
        ids = [r.id for r in client.runs()]  # newest first, as `fluksio runs` lists them

    narrow = fluksio(["runs"], {**env, "COLUMNS": "80"}, tmp_path).stdout.splitlines()
    assert all(len(line) <= 80 for line in narrow), narrow
    header = [cell.strip() for cell in narrow[0].replace("┃", "│").split("│")]
    assert header == ["run", "flow", "status", "created", "duration", "params"]
    rows = [[cell.strip() for cell in line.split("│")] for line in narrow[2:]]
    assert len(rows) == 2
    for run_id, row in zip(ids, rows):
        assert 8 <= len(row[0]) < len(run_id) and run_id.startswith(row[0])  # a unique prefix
        assert row[1:3] == ["hello", "ok"] and len(row[3]) == len("03-14 09:26:53") and row[4].endswith("s")
    assert rows[1][5].startswith('{"name": "ada-xxx') and rows[1][5].endswith("…")
    shown = fluksio(["show", rows[1][0]], env, tmp_path)  # the prefix is one `fluksio show` takes
    assert shown.returncode == 0 and ids[1] in shown.stdout

    wide = fluksio(["runs"], {**env, "COLUMNS": "200"}, tmp_path).stdout
    assert all(run_id in wide for run_id in ids) and long_name in wide


# -- once connected: patience, said on the terminal ----------------------------------------------------------


def test_a_command_waiting_through_a_broker_outage_says_so_and_says_when_it_is_back(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis").start()
    env = base_env(tmp_path, broker_url=server.url, broker_outage_s="30")
    watch = subprocess.Popen([*FLUKSIO, "watch", "--timeout", "60"], cwd=tmp_path, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in watch.stderr or ()], daemon=True).start()

    def next_line_with(text: str) -> str:
        deadline = time.monotonic() + AT_ONCE_S
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=0.2)
            except queue.Empty:
                assert watch.poll() is None, f"fluksio watch ended ({watch.returncode})"
                continue
            if text in line:
                return line
        raise AssertionError(f"no line with {text!r} within {AT_ONCE_S} s")

    try:
        subscribed = time.monotonic() + AT_ONCE_S
        import redis

        probe = redis.Redis.from_url(server.url)
        while not probe.pubsub_numsub(EVENTS_CHANNEL)[0][1]:  # watch has subscribed: it is connected
            assert time.monotonic() < subscribed and watch.poll() is None, "fluksio watch never subscribed"
            time.sleep(0.05)
        probe.close()
        server.stop()
        waiting = next_line_with("unreachable")
        assert waiting.startswith(f"waiting: broker {server.url} unreachable (")  # refused, or closed first
        assert "), retrying for " in waiting and waiting.rstrip().endswith(" s more")
        server.start()  # the same port
        assert next_line_with("reachable again").startswith(f"back: broker {server.url} reachable again")
        assert watch.poll() is None  # it waited through, it did not give up
    finally:
        watch.terminate()
        watch.wait(30)
        server.stop()


def test_a_worker_started_before_its_broker_says_so_at_once_and_attaches_when_it_comes(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis")  # its port is chosen; it is not started yet
    env = base_env(tmp_path, broker_url=server.url)
    worker = subprocess.Popen([*FLUKSIO, "worker", "--name", "early-bird", "--cpus", "1", "--gpus", "none"],
                              cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in worker.stderr or ()], daemon=True).start()
    try:
        deadline = time.monotonic() + AT_ONCE_S
        first = ""
        while "cannot reach the broker" not in first:
            assert time.monotonic() < deadline and worker.poll() is None, "the worker did not say it at once"
            try:
                first = lines.get(timeout=0.2)
            except queue.Empty:
                pass
        assert f"cannot reach the broker {server.url} (FLUKSIO_BROKER_URL): connection refused" in first
        assert "trying again in 1 s (try 1)" in first
        server.start()
        import redis

        probe = redis.Redis.from_url(server.url)
        deadline = time.monotonic() + 30
        while not probe.exists(HEARTBEAT_KEY + "early-bird"):
            assert time.monotonic() < deadline and worker.poll() is None, "the worker never attached"
            time.sleep(0.1)
        probe.close()
        assert "Traceback" not in "".join(list(lines.queue))
    finally:
        worker.terminate()
        worker.wait(30)
        server.stop()


# -- every command, three mistakes -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    args: list[str]
    #: What of the installation it reaches for: "broker", "store".
    needs: frozenset[str]
    #: A command that serves until stopped: the line it prints once it serves.
    serving: str | None = None
    #: A service (a worker, a beat) that waits for a broker not up yet instead of failing, saying so at once.
    waits_for_broker: bool = False

    @property
    def runs_apart(self) -> bool:
        """Whether it may keep running (so it is run as a process of its own and stopped)."""
        return self.serving is not None or self.waits_for_broker


NO_RUN = "01J0000000"
WAITING = "cannot reach the broker"


def walk_table(port: int) -> dict[str, Command]:
    both = frozenset({"broker", "store"})
    return {
        "run": Command(["run", HELLO, "-p", "name=ada"], both),
        "demo": Command(["demo"], both),
        "sweep": Command(["sweep", HELLO, "-g", "name=a,b"], both),
        "runs": Command(["runs"], both),
        "show": Command(["show", NO_RUN], both),
        "cancel": Command(["cancel", NO_RUN], both),
        "resume": Command(["resume", NO_RUN], both),
        "placer": Command(["placer"], both),
        "watch": Command(["watch", "--timeout", "1"], both),
        "plot": Command(["plot", NO_RUN, "loss", "-o", "loss.png"], both),
        "schedule add": Command(["schedule", "add", "hourly", HELLO, "--every", "1h", "-p", "name=ada"], both),
        "schedule list": Command(["schedule", "list"], both),
        "schedule pause": Command(["schedule", "pause", "hourly"], both),
        "schedule resume": Command(["schedule", "resume", "hourly"], both),
        "schedule remove": Command(["schedule", "remove", "hourly"], both),
        "worker": Command(["worker", "--name", "walker", "--cpus", "1", "--gpus", "none"], both,
                          waits_for_broker=True),
        "beat": Command(["beat"], both, waits_for_broker=True),
        "flower": Command(["flower", "--port", str(port)], both, serving="Flower on http://"),  # + the explorer
        "ui": Command(["ui", "--port", "0"], both, serving="run explorer on http://"),
        "metrics-server": Command(["metrics-server", "--port", "0"], both, serving="metrics on http://"),
        "db upgrade": Command(["db", "upgrade"], frozenset({"store"})),
        "alerts log": Command(["alerts", "log"], frozenset({"store"})),
        "alerts test": Command(["alerts", "test", "no-such-rule"], frozenset({"store"})),
        "artifact get": Command(["artifact", "get", "sha256:" + "0" * 64, "-o", "x.bin"], frozenset()),
        "code get": Command(["code", "get", NO_RUN, "-o", "ran"], both),
        # It reads the settings, not the installation: a wrong URL is reported, never a reason to fail.
        "security check": Command(["security", "check", "--offline"], frozenset()),
    }


def leaf_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> set[str]:
    """Every command `fluksio --help` (and each group's --help) lists."""
    ctx = click.Context(group)
    found: set[str] = set()
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            found |= leaf_commands(command, (*prefix, name))
        else:
            found.add(" ".join((*prefix, name)))
    return found


def test_the_walk_covers_every_command_the_cli_has() -> None:
    assert leaf_commands(cli) == set(walk_table(0)), "a new command: say in walk_table how it meets each mistake"


MISTAKES = {
    "wrong broker": ("broker", "broker_url", "redis://:{secret}@127.0.0.1:{closed}/0", "redis://:***@127.0.0.1"),
    "wrong store": ("store", "database_url", "postgresql+psycopg://fluksio:{secret}@127.0.0.1:{closed}/runs",
                    "postgresql+psycopg://fluksio:***@127.0.0.1"),
    "missing driver": ("store", "database_url", "mysql://fluksio:{secret}@127.0.0.1/runs", "pip install mysqlclient"),
}


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_every_command_meets_each_mistake_without_a_traceback(
        mistake: str, tmp_path: Path, redis_server: RedisServer, closed_port: int,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands that serve until stopped run as processes of their own, beside the walk; the others run in this
    process (a traceback there is an exception escaping the command), which keeps the walk to seconds."""
    part, setting, template, named = MISTAKES[mistake]
    wrong = template.format(secret=SECRET, closed=closed_port)
    env = base_env(tmp_path, **{"broker_url": redis_server.url, setting: wrong})  # everything else is right
    table = walk_table(free_port())

    def serve(name: str, command: Command) -> Said:
        cwd = tmp_path / name
        cwd.mkdir()
        until = (WAITING if command.waits_for_broker and part == "broker" else
                 command.serving if part not in command.needs else None)
        return fluksio(command.args, env, cwd, until=until, limit_s=AT_ONCE_S + 15)

    monkeypatch.chdir(tmp_path)
    outage = logging.getLogger(LOGGER)  # the commands show outage notices on the terminal: not after this test
    monkeypatch.setattr(outage, "handlers", list(outage.handlers))
    monkeypatch.setattr(outage, "level", outage.level)
    with ThreadPoolExecutor(max_workers=3) as pool:
        served = {name: pool.submit(serve, name, c) for name, c in table.items() if c.runs_apart}
        results = {name: invoke(c.args, env) for name, c in table.items() if not c.runs_apart}
        results.update({name: future.result() for name, future in served.items()})
    problems = [f"fluksio {name}: {why}\n    stderr: {results[name].stderr.strip()[-800:]}"
                for name, command in table.items() if (why := _problem(name, command, results[name], part, named))]
    assert not problems, "\n".join(problems)


def invoke(args: list[str], env: dict[str, str]) -> Said:
    """`fluksio ARGS` in this process, as its entry point runs it."""
    start = time.monotonic()
    done = CliRunner().invoke(cli, args, env={k: v for k, v in env.items() if k.startswith(("FLUKSIO_", "COLUMNS"))},
                              prog_name="fluksio")
    stderr = done.stderr
    if done.exception is not None and not isinstance(done.exception, SystemExit) and done.exc_info is not None:
        stderr += "Traceback (most recent call last):\n" + "".join(traceback.format_exception(*done.exc_info))
    return Said(done.exit_code, done.stdout, stderr, time.monotonic() - start)


def _problem(name: str, command: Command, said: Said, part: str, named: str) -> str | None:
    """What is wrong with how ``command`` met the mistake in ``part``, if anything."""
    if "Traceback" in said.stderr:
        return "printed a traceback"
    if SECRET in said.stderr + said.stdout:
        return "printed the password"
    if command.waits_for_broker and part == "broker":
        if not said.stopped or said.seconds >= AT_ONCE_S or named not in said.stderr:
            return f"it must say at once that its broker is unreachable, and keep trying ({said.seconds:.1f} s)"
        return None
    if part in command.needs:
        if said.returncode in (0, None):
            return f"exit code {said.returncode}: it must fail"
        if said.seconds >= AT_ONCE_S:
            return f"took {said.seconds:.1f} s"
        if len(said.lines) != 1 or named not in said.lines[0]:
            return f"not one line naming {named!r}"
        return None
    if named in said.stderr:
        return f"blamed the {part}, which it does not use"
    if command.serving and not said.stopped:
        return f"should serve (it does not need the {part}), exited {said.returncode}"
    return None
