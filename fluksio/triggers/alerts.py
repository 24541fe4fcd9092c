"""The alert dispatcher: tells the rules' targets about runs that ended, off the thread that ended them.

Whoever ends a run writes its end first and then calls :meth:`AlertDispatcher.run_ended`, which only puts
a job on a queue: the run's end never waits for a webhook or a mail server. A few daemon threads of this
process take the jobs; a try that fails in a way another might not (a refused connection, a timeout, a
5xx answer) is tried again after a pause that doubles, until ``alert_retry_s`` has passed since the
first. Every alert ends in the alert log (``fluksio alerts log``) as ``sent`` or ``failed``, and a failure
is logged too: none is lost quietly. (An alert still waiting when its process is killed outright is
lost with it; a process that stops cleanly gives its alerts a moment and records the rest as failed.)
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from fluksio.clock import utcnow
from fluksio.errors import ConfigError, RunNotFound
from fluksio.runtime import Runtime
from fluksio.schemas import AlertRecord, RunStatus
from fluksio.settings import Settings
from fluksio.store import alerts as alert_rows
from fluksio.store.db import Database
from fluksio.store.run_rows import load_record
from fluksio.triggers.delivery import DeliveryFailed, send
from fluksio.triggers.message import alert_body, sample_record
from fluksio.triggers.rules import AlertRule, load_rules, rules_path

log = logging.getLogger(__name__)

#: Threads sending alerts in one process: a target that hangs holds one for ``alert_timeout_s`` at most,
#: and waiting for a retry holds none.
SENDER_THREADS = 4
#: The longest pause between two tries of one alert, in seconds.
MAX_BACKOFF_S = 60.0


@dataclass
class _Job:
    """A run that ended (``rule`` is ``None``: find the rules it concerns), or one alert to send."""

    run_id: str
    status: str
    created_at: datetime
    rule: AlertRule | None = None
    body: dict[str, Any] = field(default_factory=dict)
    attempts: int = 0
    #: When to give up, on the dispatcher's clock (seconds).
    deadline: float = 0.0
    last_error: str | None = None


class AlertDispatcher:
    """Sends the alerts of one process. Thread-safe; ``run_ended`` never blocks on the network."""

    def __init__(self, rules: list[AlertRule], db: Database, settings: Settings,
                 clock: Callable[[], float] = time.monotonic,
                 deliver: Callable[[AlertRule, dict[str, Any], Settings], str] = send) -> None:
        self.rules = rules
        self.db = db
        self.settings = settings
        self._clock = clock
        self._deliver = deliver
        self._changed = threading.Condition()
        self._heap: list[tuple[float, int, _Job]] = []
        self._order = itertools.count()
        self._busy = 0
        self._closing = False
        self._threads: list[threading.Thread] = []
        self._statuses = {status for rule in rules for status in rule.statuses}

    # -- the front ------------------------------------------------------------------------------

    def run_ended(self, run_id: str, status: RunStatus | str) -> None:
        """Queue the alerts of a run that just ended ``status``; returns at once."""
        value = status.value if isinstance(status, RunStatus) else str(status)
        if value not in self._statuses:
            return
        self._push(_Job(run_id=run_id, status=value, created_at=utcnow()), self._clock())

    def idle(self, timeout_s: float) -> bool:
        """Wait until nothing is queued or being sent (at most ``timeout_s`` seconds); whether it is."""
        deadline = self._clock() + timeout_s
        with self._changed:
            while self._heap or self._busy:
                left = deadline - self._clock()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 0.05))
            return True

    def close(self, wait_s: float | None = None) -> None:
        """Give queued alerts ``wait_s`` seconds (default ``alert_timeout_s``) to go; record the rest as failed.

        Returns early when all that is left waits for a retry later than that.
        """
        deadline = self._clock() + (self.settings.alert_timeout_s if wait_s is None else wait_s)
        with self._changed:
            while self._busy or any(due < deadline for due, _, _ in self._heap):
                left = deadline - self._clock()
                if left <= 0:
                    break
                self._changed.wait(min(left, 0.05))
            self._closing = True
            left_over = [job for _, _, job in self._heap]
            self._heap.clear()
            self._changed.notify_all()
        for job in left_over:
            if job.rule is not None:
                self._give_up(job, f"not sent before the process stopped (last error: {job.last_error or 'none'})")
            else:
                log.error("alerts of run %s (%s) were not sent: the process stopped first", job.run_id, job.status)
        for thread in self._threads:
            thread.join(timeout=1.0)

    # -- the queue ------------------------------------------------------------------------------

    def _push(self, job: _Job, due: float) -> None:
        with self._changed:
            if self._closing:
                log.error("alert for run %s dropped: the dispatcher is closed", job.run_id)
                return
            heapq.heappush(self._heap, (due, next(self._order), job))
            if len(self._threads) < SENDER_THREADS and len(self._threads) < len(self._heap) + self._busy:
                thread = threading.Thread(target=self._work, name=f"fluksio-alerts-{len(self._threads)}",
                                          daemon=True)
                self._threads.append(thread)
                thread.start()
            self._changed.notify()

    def _take(self) -> _Job | None:
        with self._changed:
            while True:
                if self._closing:
                    return None
                now = self._clock()
                if self._heap and self._heap[0][0] <= now:
                    self._busy += 1
                    return heapq.heappop(self._heap)[2]
                self._changed.wait(None if not self._heap else max(self._heap[0][0] - now, 0.001))

    def _work(self) -> None:
        while (job := self._take()) is not None:
            try:
                if job.rule is None:
                    self._expand(job)
                else:
                    self._try(job)
            except Exception:
                log.exception("alert work for run %s failed", job.run_id)
            finally:
                with self._changed:
                    self._busy -= 1
                    self._changed.notify_all()

    # -- the work -------------------------------------------------------------------------------

    def _expand(self, job: _Job) -> None:
        """A run ended: one alert per rule that concerns it, each with a deadline of its own."""
        try:
            record = load_record(self.db, job.run_id)
        except RunNotFound:
            log.warning("alerts: run %s is gone; nothing to tell", job.run_id)
            return
        if record.status.is_terminal() and record.status.value != job.status:
            return  # it ended otherwise after all (another writer won its end): that writer tells
        now = self._clock()
        for rule in self.rules:
            if rule.matches(record.flow, job.status):
                body = alert_body(rule.name, record, job.status, self.settings.explorer_url)
                self._push(_Job(job.run_id, job.status, job.created_at, rule, body,
                                deadline=now + self.settings.alert_retry_s), now)

    def _try(self, job: _Job) -> None:
        assert job.rule is not None
        job.attempts += 1
        try:
            answer = self._deliver(job.rule, job.body, self.settings)
        except DeliveryFailed as exc:
            job.last_error = str(exc)
            pause = min(self.settings.alert_backoff_s * 2 ** (job.attempts - 1), MAX_BACKOFF_S)
            if exc.retryable and self._clock() + pause <= job.deadline:
                log.info("alert %s for run %s: try %d failed (%s); again in %.1f s", job.rule.name, job.run_id,
                         job.attempts, exc, pause)
                self._push(job, self._clock() + pause)
                return
            self._give_up(job, str(exc) if not exc.retryable else
                          f"{exc} (gave up after {job.attempts} tries in {self.settings.alert_retry_s:g} s)")
            return
        except Exception as exc:  # a failure delivery did not foresee: said and written down, not lost quietly
            log.exception("alert %s for run %s: sending failed unexpectedly", job.rule.name, job.run_id)
            self._give_up(job, f"{type(exc).__name__}: {exc}")
            return
        log.info("alert %s for run %s sent to %s (%s)", job.rule.name, job.run_id, job.rule.target.describe(), answer)
        self._record(job, alert_rows.SENT, None)

    def _give_up(self, job: _Job, error: str) -> None:
        assert job.rule is not None
        log.error("alert %s could not tell %s that run %s ended %s: %s", job.rule.name, job.rule.target.describe(),
                  job.run_id, job.status, error)
        self._record(job, alert_rows.FAILED, error)

    def _record(self, job: _Job, outcome: str, error: str | None) -> None:
        assert job.rule is not None
        try:
            alert_rows.record_alert(self.db, rule=job.rule.name, run_id=job.run_id,
                                    status=job.status, target=job.rule.target.describe(), outcome=outcome,
                                    attempts=job.attempts, error=error, created_at=job.created_at,
                                    finished_at=utcnow())
        except Exception:
            log.exception("could not write alert %s for run %s (%s) to the alert log", job.rule.name, job.run_id,
                          outcome)


def load_alert_rules(settings: Settings, cwd: Any = None) -> list[AlertRule]:
    """The installation's rules (none without a file), checked against the settings they need."""
    path = rules_path(settings.alerts, cwd)
    if path is None:
        return []
    rules = load_rules(path)
    for rule in rules:
        if rule.email is not None and not settings.smtp_host:
            raise ConfigError(f"alert rules {path}: rule {rule.name!r} sends email, but no SMTP server is set; "
                              "set FLUKSIO_SMTP_HOST (and FLUKSIO_SMTP_PORT, _USERNAME, _PASSWORD as needed)")
    return rules


def attach_alerts(runtime: Runtime) -> None:
    """Give ``runtime`` the dispatcher its settings call for (none when there are no rules)."""
    rules = load_alert_rules(runtime.settings)
    runtime.alerts = AlertDispatcher(rules, runtime.db, runtime.settings) if rules else None


def send_test(settings: Settings, db: Database, name: str) -> AlertRecord:
    """Send a sample alert through rule ``name`` once, now, and record it; returns the log's row."""
    rules = load_alert_rules(settings)
    rule = next((r for r in rules if r.name == name), None)
    if rule is None:
        known = ", ".join(r.name for r in rules) or "none"
        where = rules_path(settings.alerts) or "config/alerts.json (absent)"
        raise ConfigError(f"no alert rule named {name!r} in {where} (rules: {known})")
    record = sample_record()
    job = _Job(run_id="SAMPLE", status=record.status.value, created_at=utcnow(), rule=rule,
               body=alert_body(rule.name, record, record.status.value, settings.explorer_url), attempts=1)
    try:
        answer = send(rule, job.body, settings)
        outcome, error = alert_rows.SENT, None
        log.info("sample alert %s sent (%s)", rule.name, answer)
    except DeliveryFailed as exc:
        outcome, error = alert_rows.FAILED, str(exc)
    row_id = alert_rows.record_alert(db, rule=rule.name, run_id=None, status=job.status,
                                     target=rule.target.describe(), outcome=outcome, attempts=1, error=error,
                                     created_at=job.created_at, finished_at=utcnow())
    return next(a for a in alert_rows.list_alerts(db, rule=rule.name, limit=5) if a.id == row_id)
