"""Alerts over real servers: a webhook receiver (http.server) and an SMTP server (aiosmtpd) in this process,
runs that really fail (embedded), and the `fluksio alerts` commands as a user runs them."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from email import message_from_bytes, policy
from pathlib import Path
from typing import Any

import pytest

from fluksio import Flow, Settings, connect
from fluksio.store import alerts as alert_rows
from tests.integration.support.receivers import BlackHole, WebhookReceiver, wait_for
from tests.integration.support.servers import free_port, in_ci

pytestmark = pytest.mark.integration

SECRET = "correct horse battery staple"

exploding = Flow("train_exploding", inputs={"batch": (int, 7)}, outputs=["x"])


@exploding.node(provides="x")
def fit(batch: int) -> int:
    raise ValueError(f"bad batch {batch}")


fine = Flow("train_fine", outputs=["x"])


@fine.node(provides="x")
def ok() -> int:
    return 1


@pytest.fixture(scope="module")
def receiver() -> Iterator[WebhookReceiver]:
    server = WebhookReceiver().start()
    yield server
    server.stop()


def write_rules(tmp_path: Path, rules: list[dict[str, Any]]) -> Path:
    path = tmp_path / "alerts.json"
    path.write_text(json.dumps(rules))
    return path


def embedded(tmp_path: Path, rules: list[dict[str, Any]], **overrides: Any) -> Settings:
    return Settings(database_url=f"sqlite:///{tmp_path / 'fluksio.db'}", artifacts_dir=tmp_path / "artifacts",
                    cpus=2, machine_name="local", alerts=write_rules(tmp_path, rules), alert_backoff_s=0.05,
                    explorer_url="http://explorer.example.org:8585", **overrides)


def test_a_failing_run_sends_a_signed_webhook(tmp_path: Path, receiver: WebhookReceiver) -> None:
    receiver.reset()
    rules = [{"name": "failures", "statuses": ["error"], "flow": "train*",
              "webhook": {"url": f"{receiver.url}/hook", "secret": SECRET}},
             {"name": "successes", "statuses": ["ok"], "webhook": {"url": f"{receiver.url}/ok"}}]
    with connect(embedded(tmp_path, rules)) as client:
        record = client.submit(exploding, {"batch": 3}).wait(timeout=30)
        assert record.status.value == "error"
        [request] = wait_for(lambda: receiver.requests, 10, "the webhook")
        wait_for(lambda: alert_rows.list_alerts(client._runtime.db), 10, "the alert log's row")
        [logged] = alert_rows.list_alerts(client._runtime.db)
    expected = "sha256=" + hmac.new(SECRET.encode(), request.body, hashlib.sha256).hexdigest()
    assert request.path == "/hook" and request.headers["X-Fluksio-Signature"] == expected
    assert request.headers["Content-Type"] == "application/json"
    body = json.loads(request.body)
    assert body["run_id"] == record.id and body["flow"] == "train_exploding" and body["status"] == "error"
    assert body["failed_nodes"] == ["fit"] and "bad batch 3" in body["reason"] and body["rule"] == "failures"
    assert body["url"] == f"http://explorer.example.org:8585/runs/{record.id}"
    assert body["duration_s"] == pytest.approx(record.duration_ms / 1000)
    assert (logged.rule, logged.run_id, logged.outcome, logged.attempts) == ("failures", record.id, "sent", 1)


def test_a_receiver_answering_500_twice_gets_the_alert_on_the_third_try(tmp_path: Path,
                                                                        receiver: WebhookReceiver) -> None:
    receiver.reset(500, 500)
    rules = [{"name": "flaky", "statuses": ["error"], "webhook": {"url": f"{receiver.url}/flaky",
                                                                   "format": "slack"}}]
    with connect(embedded(tmp_path, rules)) as client:
        record = client.submit(exploding).wait(timeout=30)
        rows = wait_for(lambda: alert_rows.list_alerts(client._runtime.db), 15, "the alert to be sent")
    assert [r.answered for r in receiver.requests] == [500, 500, 200]
    assert len({r.body for r in receiver.requests}) == 1  # the same alert each time
    text = json.loads(receiver.requests[-1].body)["text"]
    assert f"run {record.id} of flow train_exploding ended error" in text and "bad batch 7" in text
    assert (rows[0].outcome, rows[0].attempts) == ("sent", 3)


def test_an_unreachable_target_does_not_delay_the_runs_end(tmp_path: Path) -> None:
    hole = BlackHole()
    rules = [{"name": "nowhere", "statuses": ["error", "ok"], "webhook": {"url": hole.url}}]
    try:
        with connect(embedded(tmp_path, rules, alert_timeout_s=3.0, alert_retry_s=0.5)) as client:
            record = client.submit(exploding).wait(timeout=30)
            node_end = max(n.finished_at for n in record.nodes if n.finished_at)
            # The run ended as soon as its node did, while its alert still hangs on the silent port.
            assert (record.finished_at - node_end).total_seconds() < 1.0
            assert alert_rows.list_alerts(client._runtime.db) == []
            second = client.submit(fine).wait(timeout=30)  # the next run is not held up either
            assert second.status.value == "ok" and second.duration_ms < 2000
            rows = wait_for(lambda: [r for r in alert_rows.list_alerts(client._runtime.db) if r.run_id == record.id],
                            20, "the alert's final failure")
    finally:
        hole.close()
    assert rows[0].outcome == "failed" and "timed out" in (rows[0].error or "")


def test_an_email_rule_mails_through_a_real_smtp_server(tmp_path: Path) -> None:
    try:
        from aiosmtpd.controller import Controller
    except ImportError:
        if in_ci():
            pytest.fail("aiosmtpd is not installed (pip install -e '.[dev]')")
        pytest.skip("aiosmtpd is not installed")

    received: list[Any] = []

    class Handler:
        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 - aiosmtpd's name
            received.append(envelope)
            return "250 OK"

    controller = Controller(Handler(), hostname="127.0.0.1", port=free_port())
    controller.start()
    try:
        rules = [{"name": "mail", "statuses": ["error"],
                  "email": {"to": ["ops@example.org", "ml@example.org"], "subject_prefix": "[nightly]"}}]
        settings = embedded(tmp_path, rules, smtp_host="127.0.0.1", smtp_port=controller.port,
                            smtp_from="fluksio@example.org")
        with connect(settings) as client:
            record = client.submit(exploding).wait(timeout=30)
            wait_for(lambda: alert_rows.list_alerts(client._runtime.db), 15, "the mail alert")
    finally:
        controller.stop()
    [envelope] = received
    assert envelope.rcpt_tos == ["ops@example.org", "ml@example.org"] and envelope.mail_from == "fluksio@example.org"
    mail = message_from_bytes(envelope.content, policy=policy.default)
    assert mail["Subject"] == f"[nightly] run {record.id} of flow train_exploding ended error after " \
                              f"{record.duration_ms / 1000:.1f} s"
    assert "bad batch 7" in mail.get_content()


def fluksio(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("FLUKSIO_")}
    environment.update(COLUMNS="200", **env)
    return subprocess.run([sys.executable, "-m", "fluksio.cli.main", *args], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=60)


def test_alerts_test_sends_a_sample_and_alerts_log_lists_it(tmp_path: Path, receiver: WebhookReceiver) -> None:
    receiver.reset(200, 404)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "alerts.json").write_text(json.dumps([
        {"name": "check", "webhook": {"url": f"{receiver.url}/check", "secret": SECRET}}]))
    sent = fluksio("alerts", "test", "check", cwd=tmp_path)  # the default file: config/alerts.json here
    assert sent.returncode == 0, sent.stderr
    assert "sample alert of rule check sent to http://127.0.0.1" in sent.stdout
    body = json.loads(receiver.requests[0].body)
    assert body["run_id"] == "SAMPLE" and "test alert" in body["reason"]
    failed = fluksio("alerts", "test", "check", cwd=tmp_path)
    assert failed.returncode == 1 and "answered HTTP 404" in failed.stderr
    unknown = fluksio("alerts", "test", "chek", cwd=tmp_path)
    assert unknown.returncode == 2
    assert "no alert rule named 'chek'" in unknown.stderr and "rules: check" in unknown.stderr
    listed = fluksio("alerts", "log", "--json", cwd=tmp_path)
    assert [(r["outcome"], r["run_id"]) for r in json.loads(listed.stdout)] == [("failed", None), ("sent", None)]
    assert "check" in fluksio("alerts", "log", cwd=tmp_path).stdout


def test_a_bad_rules_file_is_one_line_naming_the_rule_and_field(tmp_path: Path) -> None:
    path = tmp_path / "rules.json"
    path.write_text(json.dumps([{"name": "x", "statuses": ["failed"], "webhook": {"url": "https://h.example.org"}}]))
    done = fluksio("show", "01J0000000", cwd=tmp_path, FLUKSIO_ALERTS=str(path))  # any command that opens a client
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "rule 0 ('x'): statuses.0: 'failed' is not a status a run ends in" in done.stderr
