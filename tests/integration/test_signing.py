"""Signed messages with real processes: a real redis-server, real `fluksio worker`s, certificates made here
with openssl. Whoever can write to the broker can read it too, forge grants in the placer's books and send
messages: a call that is unsigned, signed by a certificate nobody trusts, or a signed one sent again, and a
completion that is forged or was signed for another run, each run nothing and journal nothing."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import func, select

from fluksio import RunStatus
from fluksio.messages import Completion
from fluksio.security.signatures import load_signer
from fluksio.store.db import Database
from fluksio.store.models import RunNode
from tests.certs import Identity, self_signed, signing_env, store_of
from tests.integration.support import cluster_flows as flows
from tests.integration.support import security_flows
from tests.integration.support.cluster import FLOWS_FILE, Cluster, running_cluster, wait_for_log
from tests.integration.support.forgery import arm_call, celery_app, forged_call
from tests.integration.support.monitor import Monitored

pytestmark = pytest.mark.integration

WORKER = "sig-1"
QUEUE = f"default@{WORKER}"


class Signed:
    def __init__(self, cluster: Cluster, trusted: Identity, untrusted: Identity, folder: Path) -> None:
        self.cluster = cluster
        self.trusted = trusted
        self.untrusted = untrusted
        self.folder = folder
        self.redis = redis.Redis.from_url(cluster.redis.url)
        self.db = Database(cluster.env["FLUKSIO_DATABASE_URL"])

    def marks(self, tag: str) -> list[Path]:
        return sorted(self.cluster.marks.glob(f"{tag}.ran.*"))

    def rows(self, run_id: str | None = None) -> int:
        with self.db.read() as session:
            query = select(func.count()).select_from(RunNode)
            return int(session.scalar(query if run_id is None else query.where(RunNode.run_id == run_id)) or 0)


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Signed]:
    folder = tmp_path_factory.mktemp("signed")
    trusted = self_signed(folder / "ids", "installation")
    untrusted = self_signed(folder / "ids", "intruder")
    store = store_of(folder / "store", trusted)
    env = {**signing_env(trusted, store), "FLUKSIO_FLOWS": f"{FLOWS_FILE},{Path(security_flows.__file__)}"}
    workers = {WORKER: ("--cpus", "2", "--gpus", "none", "--drivers")}
    with running_cluster(folder, workers, env=env) as setup:
        yield Signed(setup, trusted, untrusted, folder)


def wait_until(condition: Any, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def released(signed: Signed, tag: str) -> None:
    (signed.cluster.marks / f"{tag}.go").write_text("go")


def test_a_run_works_end_to_end_and_what_crosses_the_broker_is_signed(signed: Signed) -> None:
    with signed.cluster.client() as client, Monitored(signed.cluster.redis.url) as seen:
        assert client.app.conf.task_serializer == "auth"
        handle = client.submit(flows.marked, {"tag": "signed-run"})
        record = handle.wait(timeout=60)
    assert record.status is RunStatus.OK and record.result == {"x": "signed-run"}
    pushed = [line for line in seen.lines if b'"LPUSH"' in line or b'"RPUSH"' in line]
    calls = [line for line in pushed if QUEUE.encode() in line]
    completions = [line for line in pushed if f"fluksio:inbox:{handle.id}".encode() in line]
    assert calls and completions, pushed
    # The call's body is Celery's signed envelope, not JSON anyone could rewrite; the completion carries ours.
    assert all(b"application/data" in line and b"application/json" not in line for line in calls)
    assert all(b"signature" in line and b"signed_by" in line for line in completions)


def test_an_unsigned_call_is_refused_and_nothing_runs(signed: Signed) -> None:
    call_id = "forged.unsigned.1"
    grant = arm_call(signed.cluster, call_id)
    rows = signed.rows()
    app = celery_app(signed.cluster, "json")
    app.send_task("fluksio.call", kwargs={"call": forged_call("guarded", "mark_then_wait", call_id,
                                                              {"tag": "unsigned"}, grant)}, queue=QUEUE)
    wait_for_log(signed.cluster, WORKER, "Refusing to deserialize untrusted content of type json")
    time.sleep(1.0)  # a call that ran would have left its mark well within this
    assert signed.marks("unsigned") == [] and signed.rows() == rows
    _give_back(signed, call_id)


def test_a_call_signed_by_a_certificate_nobody_trusts_is_refused(signed: Signed) -> None:
    call_id = "forged.untrusted.1"
    grant = arm_call(signed.cluster, call_id)
    rows = signed.rows()
    own_store = store_of(signed.folder / "intruder-store", signed.untrusted)
    script = textwrap.dedent(f"""
        from celery import Celery
        app = Celery("intruder", broker={signed.cluster.redis.url!r}, set_as_current=False)
        app.conf.update(task_serializer="auth", accept_content=["auth"], security_key={str(signed.untrusted.key)!r},
                        security_certificate={str(signed.untrusted.certificate)!r},
                        security_cert_store={str(own_store)!r}, broker_connection_retry_on_startup=True)
        app.setup_security()
        call = {forged_call("guarded", "mark_then_wait", call_id, {"tag": "untrusted"}, grant)!r}
        app.send_task("fluksio.call", kwargs={{"call": call}}, queue={QUEUE!r})
    """)
    sent = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert sent.returncode == 0, sent.stderr
    log = wait_for_log(signed.cluster, WORKER, "Unknown certificate")
    time.sleep(1.0)
    assert signed.marks("untrusted") == [] and signed.rows() == rows
    assert "intruder" in log  # the certificate is named: its issuer and serial
    _give_back(signed, call_id)


def test_a_signed_call_sent_again_runs_nothing_for_its_run_or_another(signed: Signed) -> None:
    with signed.cluster.client() as client:
        first = client.submit(security_flows.guarded, {"tag": "replayed"})
        wait_until(lambda: signed.marks("replayed"), "the first call to start")
        captured = _captured_call(signed, first.id)  # the signed message, as the broker holds it mid-call
        released(signed, "replayed")
        assert first.wait(timeout=60).status is RunStatus.OK
        other = client.submit(security_flows.guarded, {"tag": "bystander"})  # running while the copy comes
        wait_until(lambda: signed.marks("bystander"), "the other run's call to start")
        rows_first, rows_other = signed.rows(first.id), signed.rows(other.id)
        call_id = captured["headers"]["id"]
        arm_call(signed.cluster, call_id)  # a grant forged to match, so that only the run store can refuse it
        signed.redis.lpush(QUEUE, json.dumps(captured))
        wait_for_log(signed.cluster, WORKER, f"refusing call {call_id}: run {first.id} is ok, not running")
        time.sleep(1.0)
        assert len(signed.marks("replayed")) == 1 and len(signed.marks("bystander")) == 1
        assert signed.rows(first.id) == rows_first == 1 and signed.rows(other.id) == rows_other == 0
        released(signed, "bystander")
        record = other.wait(timeout=60)
    assert record.status is RunStatus.OK and record.result == {"x": "bystander"} and len(record.nodes) == 1
    _give_back(signed, call_id)


def test_forged_completions_on_a_runs_inbox_are_dropped_and_never_journaled(signed: Signed) -> None:
    signer = load_signer(signed.cluster.settings())
    assert signer is not None
    with signed.cluster.client() as client:
        done = client.submit(flows.marked, {"tag": "elsewhere"}).wait(timeout=60)
        handle = client.submit(security_flows.guarded, {"tag": "inboxed"})
        wait_until(lambda: signed.marks("inboxed"), "the call to start")
        call_id = f"{handle.id}.mark_then_wait.1"
        forged = Completion(call_id=call_id, node="mark_then_wait", attempt=1, status="ok", machine=WORKER,
                            outputs={"x": "forged"})
        inbox = f"fluksio:inbox:{handle.id}"
        signed.redis.rpush(inbox, json.dumps(forged.to_wire()))  # unsigned
        # Signed by a trusted key, but for another run: copied from that run's inbox, it verifies only there.
        signed.redis.rpush(inbox, signer.seal(done.id, json.dumps(forged.to_wire())))
        log = wait_for_log(signed.cluster, WORKER, f"does not verify for run {handle.id}")
        assert f"run {handle.id}: dropping a message on its inbox that fluksio did not send: an unsigned" in log
        time.sleep(0.5)
        assert signed.rows(handle.id) == 0
        released(signed, "inboxed")
        record = handle.wait(timeout=60)
    assert record.status is RunStatus.OK and record.result == {"x": "inboxed"}
    assert [(n.node, n.attempt) for n in record.nodes] == [("mark_then_wait", 1)]


def test_a_worker_whose_certificate_the_others_do_not_trust_is_told_so_at_start(signed: Signed) -> None:
    store = store_of(signed.folder / "both", signed.trusted, signed.untrusted)
    intruder = {**signing_env(signed.untrusted, store)}
    signed.cluster.start_worker("odd-1", "--cpus", "1", "--gpus", "none", "--labels", "odd", env=intruder)
    try:
        log = wait_for_log(signed.cluster, "odd-1", "does not trust the certificate nodes@odd-1 signs with")
        wait_for_log(signed.cluster, "odd-1", "nodes@odd-1 ready.")  # Celery's signal handlers are in: a clean stop
        assert f"nodes@{WORKER} does not trust" in log and f"drivers@{WORKER} does not trust" in log
        assert "FLUKSIO_SIGNING_CERT_STORE" in log
    finally:
        signed.cluster.stop("odd-1")


def _captured_call(signed: Signed, run_id: str) -> dict[str, Any]:
    """The call message of the run that a worker holds unacknowledged (kombu keeps a copy until the call ends)."""
    found: list[dict[str, Any]] = []

    def look() -> bool:
        for raw in signed.redis.hvals("unacked"):
            message, _exchange, _routing_key = json.loads(raw)
            if message["headers"].get("task") == "fluksio.call" and message["headers"]["id"].startswith(run_id):
                found.append(message)
                return True
        return False

    wait_until(look, "the call's unacknowledged copy")
    message = found[0]
    assert message["content-type"] == "application/data"  # Celery's signed envelope, not JSON
    envelope = base64.b64decode(base64.b64decode(message["body"]))
    assert envelope.count(b"\x00\x01") >= 4 and b'"call_id"' in envelope.split(b"\x00\x01", 4)[4]
    return message


def _give_back(signed: Signed, call_id: str) -> None:
    """Free what a forged grant held on the worker (nobody ran the call, so nobody gave it back)."""
    from fluksio.placement.redis import RedisBooks

    books = RedisBooks(signed.redis, heartbeat_ttl_s=10)
    for grant in books.held().get(WORKER, []):
        if grant.id == call_id:
            books.give(grant)


def test_the_security_check_finds_every_signing_process_trusting_this_one(signed: Signed) -> None:
    done = subprocess.run([sys.executable, "-m", "fluksio.cli.main", "security", "check", "--json"],
                          env=signed.cluster.env, capture_output=True, text=True, timeout=60)
    found = {entry["check"]: entry for entry in json.loads(done.stdout)}
    assert found["signing"]["verdict"] == "ok" and "installation" in found["signing"]["detail"]
    assert found["signing: peers"]["verdict"] == "ok", found["signing: peers"]
    assert f"drivers@{WORKER}" in found["signing: peers"]["detail"] and f"nodes@{WORKER}" in found[
        "signing: peers"]["detail"]
