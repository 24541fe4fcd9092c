"""``fluksio worker``: a real Celery worker with an inventory, in the distributed mode.

Node calls run in a prefork pool whose concurrency equals the machine's cpus,
so a call the placer granted starts at once (and can be killed). Drivers run
in a separate process with a thread pool (``--drivers`` starts it beside the
node worker; it dies with its parent).
"""

from __future__ import annotations

import logging
import subprocess
import sys
from typing import Any

from celery.signals import worker_process_init, worker_process_shutdown, worker_ready, worker_shutting_down

from fluksio.broker.connection import stopping, wait_for_broker
from fluksio.constants import CHANGES_CHANNEL, DRIVERS_QUEUE
from fluksio.errors import ConfigError
from fluksio.execution.isolated import die_with_parent, run_in_child, run_package_in_child
from fluksio.execution.lost import settle_lost_calls
from fluksio.execution.warm import SETTING as FORK_SERVER_SETTING
from fluksio.execution.warm import StartOnGpus, StartPackaged, WarmStarts
from fluksio.failures import reason
from fluksio.placement.redis import RedisBooks
from fluksio.provisioners import Poller
from fluksio.routing import node_queues
from fluksio.runtime import Runtime
from fluksio.schemas import Inventory
from fluksio.security.code_trust import require_code_trust
from fluksio.security.trust import introduce
from fluksio.settings import Settings, require_redis_broker
from fluksio.triggers.alerts import attach_alerts, load_alert_rules
from fluksio.worker.app import close_app, create_app, start_sweeper
from fluksio.worker.heartbeat import Heartbeat
from fluksio.worker.idle import IdleExit, celery_busy, grants_held

log = logging.getLogger(__name__)

def require_distributed(settings: Settings) -> None:
    if settings.embedded:
        raise ConfigError(
            "fluksio worker needs a shared broker: set FLUKSIO_BROKER_URL (e.g. redis://127.0.0.1:6379/0) "
            "and a run store every host can reach (FLUKSIO_DATABASE_URL)"
        )
    require_redis_broker(settings)


def require_shared_store(settings: Settings, private_store: bool) -> None:
    """A worker journals into the run store every process of the installation reads.

    A run store left at its default is a SQLite file in the worker's working directory: the runs it drove and
    the calls it ran would be written where no client, driver or other worker looks, and nothing would say so.
    So it is refused, unless ``private_store`` (``--private-store``) says it is meant.
    """
    if "database_url" not in settings.model_fields_set and not private_store:
        raise ConfigError(
            "fluksio worker needs the installation's run store, and FLUKSIO_DATABASE_URL is not set: set it "
            "(e.g. postgresql+psycopg://USER@HOST/fluksio, or sqlite:////ABSOLUTE/PATH.db when every process runs "
            f"on this host) in the environment or fluksio.toml; --private-store journals into "
            f"{settings.database_url} here, which no other process reads")


def _fresh_connections_after_fork(runtime: Runtime) -> None:
    @worker_process_init.connect(weak=False)
    def _reset(**_: Any) -> None:
        # A forked pool process must not share its parent's database connections.
        runtime.db.engine.dispose(close=False)
        runtime.db.write_engine.dispose(close=False)


def run_node_worker(settings: Settings, inventory: Inventory, with_drivers: bool, loglevel: str,
                    idle_timeout_s: float | None = None, with_beat: bool = False, private_store: bool = False) -> None:
    require_distributed(settings)
    require_shared_store(settings, private_store)
    require_code_trust(settings)
    # Started first, so that it loads the flows while this process does; the pool forks after it is ready. GPU
    # calls start warm from it, and so do the calls of shipped code packages (each package gets a server).
    shipped = settings.accept_code != "registered"
    warm = WarmStarts.start() if settings.gpu_fork_server and (inventory.gpus or shipped) else None
    try:
        runtime = Runtime.distributed(settings, machine=inventory.name)  # a run store it cannot open ends it here
        wait_for_broker(settings)  # a broker not up yet is said at once, then waited for (as Celery does)
    except BaseException:
        if warm is not None:
            warm.close()
        raise
    books = runtime.placer.books
    assert isinstance(books, RedisBooks)
    start_on_gpus, start_packaged = _warm_or_fresh(warm, inventory, shipped)
    app = create_app(settings, runtime, start_on_gpus=start_on_gpus, start_packaged=start_packaged)
    introduction = introduce(runtime.settings, runtime.redis, f"nodes@{inventory.name}")
    _fresh_connections_after_fork(runtime)
    settle_lost_calls(runtime)  # a pool process killed mid-call (the OOM killer) ends its call here
    if with_drivers:
        load_alert_rules(settings)  # a bad rules file stops this command, not just its drivers' process
    drivers = _spawn_driver_process(inventory.name, loglevel, private_store) if with_drivers else None
    beat = spawn_beat_process(loglevel) if with_beat else None
    books.attach(inventory)
    heartbeat = Heartbeat(books, inventory, settings.heartbeat_interval_s)
    heartbeat.start()
    @worker_shutting_down.connect(weak=False)
    def _leave_the_books(**_: Any) -> None:
        # Stop being placed on at once; the calls still running give their grants back as they end. The
        # heartbeat stops first (a beat under way is waited for): it goes on while Celery shuts down, and a
        # beat that finds the machine gone attaches it again, all free, for the placer to grant calls to.
        # Redis away now is not waited out: the machine's books go when its heartbeat expires.
        stopping(runtime.redis)
        heartbeat.stop()
        _detach(books, inventory.name, settings.heartbeat_ttl_s)

    # A provisioned worker (a Slurm job) gives its resources back once nothing calls it for a while.
    idle = (IdleExit(idle_timeout_s, [celery_busy, grants_held(books, inventory.name)]).start_when_ready()
            if idle_timeout_s else None)
    log.info("machine %s attached: %s", inventory.name, inventory.model_dump_json())
    try:
        worker = app.Worker(
            hostname=f"nodes@{inventory.name}", queues=node_queues(inventory), concurrency=inventory.cpus,
            pool="prefork", loglevel=loglevel, without_mingle=True, without_gossip=True,
        )
        worker.start()
        code = worker.exitcode
    finally:
        if idle is not None:
            idle.stop()
        stopping(runtime.redis)
        heartbeat.stop()
        try:
            introduction.withdraw()
        except Exception as exc:  # its key expires on its own
            log.warning("could not take back %s's introduction: %s", inventory.name, reason(exc))
        _detach(books, inventory.name, settings.heartbeat_ttl_s)
        for child in (drivers, beat):
            if child is not None:
                _stop_child(child)
        if warm is not None:
            warm.close()
        runtime.close()
    sys.exit(code or 0)


def _detach(books: RedisBooks, machine: str, heartbeat_ttl_s: float) -> None:
    """Leave the placer's books; when Redis cannot be reached, say so in one line (they expire on their own)."""
    try:
        books.detach(machine)
    except Exception as exc:
        log.warning("could not leave the placer's books (%s): machine %s is detached once its heartbeat expires, "
                    "within %g s of Redis answering again", reason(exc), machine, heartbeat_ttl_s)


def _warm_or_fresh(warm: WarmStarts | None, inventory: Inventory, shipped: bool,
                   ) -> tuple[StartOnGpus, StartPackaged]:
    """How this worker starts its GPU calls and the calls of shipped code packages (``shipped``: it runs some),
    said once in its log when the log is set up (the worker is ready)."""
    machine = inventory.name
    said: list[tuple[int, str]] = []
    why = warm.wait_ready() if warm is not None else f"{FORK_SERVER_SETTING}=false"
    if warm is not None and why is None:
        if inventory.gpus:
            said.append((logging.INFO, f"GPU calls on {machine} start warm: forked from the fork server (pid "
                                       f"{warm.process.pid}) that loaded {', '.join(warm.flows) or 'no flows'}"))
        if shipped:
            said.append((logging.INFO, f"shipped code packages on {machine} start warm: each package is imported "
                                       f"once, by a server of its own forked from the fork server (pid "
                                       f"{warm.process.pid})"))
    else:
        if warm is not None and inventory.gpus:  # a worker without a fork server said nothing of GPU calls before
            said.append((logging.WARNING, f"GPU calls on {machine} start in a fresh interpreter each: {why}"))
        if shipped:
            said.append((logging.WARNING, f"shipped code packages on {machine} start in a fresh interpreter each "
                                          f"call, which imports the package again: {why}"))

    @worker_ready.connect(weak=False)
    def _say(**_: Any) -> None:
        for level, line in said:
            log.log(level, line)

    if warm is None or why is not None:
        return run_in_child, run_package_in_child

    @worker_process_shutdown.connect(weak=False)
    def _let_runners_go(**_: Any) -> None:
        # A pool process that ends lets its kept runners go gently (they run their calls' exit handlers), rather
        # than have them killed when its lifelines close.
        warm.kept.close()

    return warm.run, warm.run_packaged


def _stop_child(child: subprocess.Popen[bytes]) -> None:
    child.terminate()
    try:
        child.wait(30)
    except subprocess.TimeoutExpired:
        child.kill()


def run_driver_worker(settings: Settings, name: str, loglevel: str, with_beat: bool = False,
                      private_store: bool = False) -> None:
    require_distributed(settings)
    require_shared_store(settings, private_store)
    runtime = Runtime.distributed(settings, machine=name)
    wait_for_broker(settings)
    attach_alerts(runtime)  # drivers end runs, and their sweeper abandons runs: both tell the alerts
    app = create_app(settings, runtime)
    introduction = introduce(runtime.settings, runtime.redis, f"drivers@{name}")
    sweeper = start_sweeper(app, runtime)
    poller = start_poller(runtime)
    beat = spawn_beat_process(loglevel) if with_beat else None

    @worker_shutting_down.connect(weak=False)
    def _hand_over(**_: Any) -> None:
        # A warm shutdown waits for running tasks, and a driver runs as long as its run: let them go.
        runtime.stop_driving()

    try:
        worker = app.Worker(
            hostname=f"drivers@{name}", queues=[DRIVERS_QUEUE], concurrency=settings.driver_concurrency,
            pool="threads", loglevel=loglevel, without_mingle=True, without_gossip=True,
        )
        worker.start()
        code = worker.exitcode
    finally:
        introduction.withdraw()
        sweeper.stop()
        if beat is not None:
            _stop_child(beat)
        if poller is not None:
            poller.stop()
        if runtime.provisioner is not None:
            # Machines this process asked for and that never came are not left waiting in the queue.
            runtime.provisioner.shutdown()
        close_app(app)
        runtime.close()
    sys.exit(code or 0)


def start_poller(runtime: Runtime) -> Poller | None:
    """Watch this installation's machine requests; every change wakes waiting drivers."""
    if runtime.provisioner is None:
        return None
    redis_client = runtime.redis
    assert redis_client is not None  # provisioners exist only in the distributed mode

    def wake_drivers(_changed: object) -> None:
        redis_client.publish(CHANGES_CHANNEL, "provision")

    return Poller(runtime.provisioner, interval_s=min(2.0, runtime.settings.heartbeat_interval_s * 2),
                  on_change=wake_drivers).start()


def spawn_beat_process(loglevel: str) -> subprocess.Popen[bytes]:
    """`fluksio beat` beside this worker (``--beat``); it dies with its parent."""
    command = [sys.executable, "-m", "fluksio.cli.main", "beat", "--loglevel", loglevel.lower()]
    return subprocess.Popen(command, preexec_fn=die_with_parent)  # noqa: PLW1509 - only sets PDEATHSIG


def _spawn_driver_process(name: str, loglevel: str, private_store: bool) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "fluksio.cli.main", "worker", "--name", name, "--drivers-only",
               "--loglevel", loglevel, *(["--private-store"] if private_store else [])]
    return subprocess.Popen(command, preexec_fn=die_with_parent)  # noqa: PLW1509 - only sets PDEATHSIG
