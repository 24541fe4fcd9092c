"""Outage notices: said at once, then at most every few seconds, then once when the part is back."""

from __future__ import annotations

import logging

import pytest

from fluksio.outage import LOGGER, Notices


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_an_outage_is_said_at_once_then_every_few_seconds_then_its_end(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    clock = Clock()
    notices = Notices("broker redis://h:6379/0", every_s=5.0, clock=clock)
    notices.waiting("refused", 59.6)
    clock.now += 1.0
    notices.waiting("refused", 58.6)  # within 5 s of the last: not said
    clock.now += 4.5
    notices.waiting("refused", 54.1)
    notices.over()
    assert said(caplog) == [
        "broker redis://h:6379/0 unreachable (refused), retrying for 60 s more",
        "broker redis://h:6379/0 unreachable (refused), retrying for 54 s more",
        "broker redis://h:6379/0 reachable again",
    ]
    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.WARNING, logging.INFO]


def test_no_end_is_said_of_an_outage_never_said(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    Notices("run store").over()
    assert said(caplog) == []


def test_the_next_outage_is_said_at_once_again(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    clock = Clock()
    notices = Notices("run store", clock=clock)
    notices.waiting("timed out", 10)
    notices.over()
    notices.waiting("refused", 29.9)
    assert said(caplog)[-1] == "run store unreachable (refused), retrying for 30 s more"
