"""The Celery configuration an installation's workers and drivers run with."""

from __future__ import annotations

import pytest

from fluksio import Settings
from fluksio.worker.app import celery_config


def test_json_is_the_only_content_accepted():
    config = celery_config(Settings(broker_url="redis://127.0.0.1:6390/0"))
    assert config["accept_content"] == ["json"] == config["result_accept_content"]
    assert config["task_serializer"] == "json"


def test_task_events_are_off_unless_asked_for():
    # Four broker messages per call that nobody reads unless Flower watches; Flower switches them on.
    config = celery_config(Settings(broker_url="redis://127.0.0.1:6390/0"))
    assert config["worker_send_task_events"] is False and config["task_send_sent_event"] is False


@pytest.mark.parametrize("value", ["true", "1", "yes"])
def test_fluksio_task_events_switches_them_on_from_the_start(monkeypatch, value):
    monkeypatch.setenv("FLUKSIO_TASK_EVENTS", value)
    config = celery_config(Settings(broker_url="redis://127.0.0.1:6390/0"))
    assert config["worker_send_task_events"] is True and config["task_send_sent_event"] is True
