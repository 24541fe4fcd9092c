"""A `fluksio worker` stopped with SIGTERM (a warm shutdown) leaves the placer for good: its heartbeat, which
goes on while Celery shuts down, must not attach it again with all its resources free (issue #31, item 7)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
import redis

from fluksio.constants import CHANGES_CHANNEL, MACHINE_KEY
from tests.integration.support.cluster import running_cluster, wait_for_log

pytestmark = pytest.mark.integration


def test_a_worker_stopping_warmly_is_never_attached_again_after_it_left(tmp_path: Path) -> None:
    # Beats every 0.1 s: many of them fall within the second or two that an idle worker's warm shutdown lasts.
    with running_cluster(tmp_path, {"leaving": ("--cpus", "2", "--gpus", "none")},
                         env={"FLUKSIO_HEARTBEAT_INTERVAL_S": "0.1"}) as cluster:
        books = redis.Redis.from_url(cluster.redis.url)
        # Every attach publishes on the placer's channel: listening from before the SIGTERM, none is missed
        # however short it lasts (the machine's key, read now and then, could be back and gone in between).
        changes = books.pubsub()
        changes.subscribe(CHANGES_CHANNEL)
        confirmed = changes.get_message(timeout=5)  # listening for sure before the SIGTERM
        assert confirmed is not None and confirmed["type"] == "subscribe"
        # Ready, not only attached: a SIGTERM before Celery sets up its handlers kills the process outright.
        wait_for_log(cluster, "leaving", "nodes@leaving ready.")
        process = cluster.workers.pop("leaving")
        os.killpg(process.pid, signal.SIGTERM)
        try:
            code = process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            raise
        # Whatever it published is here already (it has exited): taken until the channel falls silent.
        said = []
        while (message := changes.get_message(timeout=0.2)) is not None:
            said.append(message["data"].decode())
        changes.close()
        log = cluster.log_of("leaving")
        assert code == 0, log
        assert "attach" not in said, f"the stopping worker was attached again ({said}): {log[-1500:]}"
        assert "attaching it again" not in log, log[-1500:]
        assert not books.exists(MACHINE_KEY + "leaving")


@pytest.mark.parametrize("drivers", [(), ("--drivers",)], ids=["node worker", "with its drivers"])
def test_a_worker_stopped_while_its_redis_is_down_exits_within_seconds(tmp_path: Path, drivers: tuple[str, ...]
                                                                       ) -> None:
    with running_cluster(tmp_path, {"cut-off": ("--cpus", "1", "--gpus", "none", *drivers)}) as cluster:
        wait_for_log(cluster, "cut-off", "nodes@cut-off ready.")
        cluster.redis.stop()  # the broker, the books and the heartbeats: all gone at once
        process = cluster.workers.pop("cut-off")
        os.killpg(process.pid, signal.SIGTERM)
        try:
            code = process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
            raise AssertionError(f"still running 10 s after SIGTERM: {cluster.log_of('cut-off')[-3000:]}") from None
        log = cluster.log_of("cut-off")
        assert code == 0, log[-3000:]
        assert "Traceback" not in log, log[-3000:]  # the heartbeat says it lost Redis in one line
