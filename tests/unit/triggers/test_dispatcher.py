"""The alert dispatcher's retries and its log, with a delivery of the test's making (the real one, over
HTTP and SMTP, is in tests/integration/test_alerts.py)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from fluksio import Settings
from fluksio.clock import utcnow
from fluksio.schemas import RunStatus
from fluksio.store import alerts as alert_rows
from fluksio.store.db import Database
from fluksio.store.models import Run
from fluksio.store.run_rows import insert_run
from fluksio.triggers.alerts import AlertDispatcher
from fluksio.triggers.delivery import DeliveryFailed
from fluksio.triggers.rules import AlertRule, parse_rules


def failed_run(db: Database, flow: str = "train") -> str:
    now = utcnow()
    run = Run(id=f"01TEST{time.time_ns() % 10**20:020d}", flow=flow, params={}, params_digest="d", status="error",
              status_reason="node(s) fit failed", created_at=now, started_at=now, finished_at=now, duration_ms=250,
              engine="embedded")
    insert_run(db, run)
    return run.id


def rules(*names: str, statuses: tuple[str, ...] = ("error",), flow: str | None = None) -> list[AlertRule]:
    return parse_rules([{"name": n, "statuses": list(statuses), **({"flow": flow} if flow else {}),
                         "webhook": {"url": f"https://hooks.example.org/{n}"}} for n in names])


class Answers:
    """A delivery that fails as scripted (retryable or not), then succeeds; it records each try."""

    def __init__(self, *failures: bool) -> None:
        self.failures = list(failures)
        self.tries: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()

    def __call__(self, rule: AlertRule, body: dict[str, Any], settings: Settings) -> str:
        with self.lock:
            self.tries.append((rule.name, body))
            if self.failures:
                raise DeliveryFailed("scripted failure", self.failures.pop(0))
        return "HTTP 200"


def settings(**overrides: Any) -> Settings:
    return Settings(**{"alert_retry_s": 5.0, "alert_backoff_s": 0.01, "alert_timeout_s": 1.0, **overrides})


def test_an_alert_is_retried_with_backoff_until_it_is_sent(db: Database) -> None:
    answers = Answers(True, True)
    dispatcher = AlertDispatcher(rules("hook"), db, settings(), deliver=answers)
    run_id = failed_run(db)
    dispatcher.run_ended(run_id, RunStatus.ERROR)
    assert dispatcher.idle(10)
    assert len(answers.tries) == 3
    [logged] = alert_rows.list_alerts(db)
    assert (logged.rule, logged.run_id, logged.outcome, logged.attempts) == ("hook", run_id, "sent", 3)
    assert logged.error is None
    body = answers.tries[-1][1]
    assert body["run_id"] == run_id and body["status"] == "error" and body["duration_s"] == 0.25
    dispatcher.close()


def broken(rule: AlertRule, body: dict[str, Any], settings: Settings) -> str:
    raise LookupError("a bug in a delivery")


@pytest.mark.parametrize(("deliver", "error"), [
    (Answers(False), "scripted failure"),  # a failure retrying cannot mend: recorded at once
    (broken, "LookupError: a bug in a delivery"),  # a failure delivery did not foresee: recorded, not lost
])
def test_a_failure_not_worth_retrying_is_recorded_at_once(db: Database, deliver: Any, error: str) -> None:
    dispatcher = AlertDispatcher(rules("hook"), db, settings(), deliver=deliver)
    dispatcher.run_ended(failed_run(db), RunStatus.ERROR)
    assert dispatcher.idle(10)
    [logged] = alert_rows.list_alerts(db)
    assert (logged.outcome, logged.attempts, logged.error) == ("failed", 1, error)
    dispatcher.close()


def test_a_webhook_that_answers_no_http_is_a_failed_try_that_may_pass() -> None:
    import socket
    import threading as threads

    from fluksio.triggers.delivery import post_webhook
    from fluksio.triggers.rules import WebhookTarget

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def babble() -> None:
        connection, _ = server.accept()
        connection.recv(65536)
        connection.sendall(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")  # not HTTP: a wrong port
        connection.close()

    threads.Thread(target=babble, daemon=True).start()
    target = WebhookTarget(url=f"http://127.0.0.1:{server.getsockname()[1]}/hook")
    try:
        post_webhook(target, {"run_id": "r", "status": "error"}, timeout_s=5)
        raise AssertionError("a webhook that answers no HTTP was taken as sent")
    except DeliveryFailed as exc:
        assert exc.retryable and "did not answer in HTTP" in str(exc)
    finally:
        server.close()


def test_retries_stop_at_the_bound_and_the_failure_is_recorded(db: Database) -> None:
    answers = Answers(*[True] * 1000)
    dispatcher = AlertDispatcher(rules("hook"), db, settings(alert_retry_s=0.3, alert_backoff_s=0.05),
                                 deliver=answers)
    dispatcher.run_ended(failed_run(db), RunStatus.ERROR)
    assert dispatcher.idle(10)
    [logged] = alert_rows.list_alerts(db)
    assert logged.outcome == "failed" and 2 <= logged.attempts < 10 and "gave up after" in (logged.error or "")
    dispatcher.close()


def test_only_rules_for_the_status_and_flow_send(db: Database) -> None:
    answers = Answers()
    chosen = rules("errors") + rules("ok-only", statuses=("ok",)) + rules("etl", flow="etl*")
    dispatcher = AlertDispatcher(chosen, db, settings(), deliver=answers)
    dispatcher.run_ended(failed_run(db, flow="train"), RunStatus.ERROR)
    dispatcher.run_ended("not-there", RunStatus.CANCELLED)  # no rule wants it: not even looked up
    assert dispatcher.idle(10)
    assert [name for name, _ in answers.tries] == ["errors"]
    dispatcher.close()


def test_run_ended_returns_at_once_even_when_sending_hangs(db: Database) -> None:
    release = threading.Event()

    def hang(rule: AlertRule, body: dict[str, Any], settings: Settings) -> str:
        release.wait(10)
        return "late"

    dispatcher = AlertDispatcher(rules("slow"), db, settings(), deliver=hang)
    run_id = failed_run(db)
    started = time.monotonic()
    for _ in range(20):
        dispatcher.run_ended(run_id, RunStatus.ERROR)
    assert time.monotonic() - started < 0.5
    release.set()
    assert dispatcher.idle(10)
    assert len(alert_rows.list_alerts(db, limit=100)) == 20
    dispatcher.close()


def test_closing_records_what_could_not_be_sent_in_time(db: Database) -> None:
    answers = Answers(*[True] * 1000)
    dispatcher = AlertDispatcher(rules("hook"), db, settings(alert_retry_s=60, alert_backoff_s=30),
                                 deliver=answers)
    dispatcher.run_ended(failed_run(db), RunStatus.ERROR)
    deadline = time.monotonic() + 10
    while not answers.tries and time.monotonic() < deadline:
        time.sleep(0.01)
    dispatcher.close(wait_s=0.2)  # its retry is 30 s away: closing does not wait for it
    [logged] = alert_rows.list_alerts(db)
    assert logged.outcome == "failed" and "not sent before the process stopped" in (logged.error or "")
