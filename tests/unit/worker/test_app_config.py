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


def test_signing_switches_the_task_serializer_to_auth_and_accepts_nothing_else(tmp_path):
    config = celery_config(Settings(broker_url="redis://127.0.0.1:6390/0", signing_key=tmp_path / "k",
                                    signing_certificate=tmp_path / "c", signing_cert_store=tmp_path / "s"))
    assert config["task_serializer"] == "auth" and config["accept_content"] == ["auth"]
    assert config["security_key"] == str(tmp_path / "k") and config["security_digest"] == "sha256"
    assert config["result_accept_content"] == ["json"] and config["event_serializer"] == "json"


def test_a_rediss_broker_verifies_its_server_in_celery_too():
    config = celery_config(Settings(broker_url="rediss://h:6380/0?ssl_ca_certs=/ca.pem",
                                    result_backend="rediss://h:6380/1"))
    assert config["broker_url"] == "rediss://h:6380/0?ssl_ca_certs=/ca.pem&ssl_cert_reqs=required"
    assert config["result_backend"] == "rediss://h:6380/1?ssl_cert_reqs=required"


def test_a_signing_mistake_is_one_line_naming_the_file(tmp_path):
    from fluksio import ConfigError
    from fluksio.runtime import Runtime
    from fluksio.worker.app import create_app

    settings = Settings(database_url=f"sqlite:///{tmp_path / 'db'}", artifacts_dir=tmp_path / "a",
                        signing_key=tmp_path / "missing.key", signing_certificate=tmp_path / "c",
                        signing_cert_store=tmp_path / "s")
    runtime = Runtime.standalone(settings)
    with pytest.raises(ConfigError, match=r"FLUKSIO_SIGNING_KEY=.*missing.key: cannot read it"):
        create_app(settings, runtime)


def test_flowers_app_signs_its_control_commands_too(tmp_path):
    from fluksio.worker.flower import flower_app
    from tests.certs import self_signed, store_of

    me = self_signed(tmp_path / "ids", "flower")
    app = flower_app(Settings(broker_url="redis://127.0.0.1:6390/0", signing_key=me.key,
                              signing_certificate=me.certificate, signing_cert_store=store_of(tmp_path / "s", me)))
    assert app.conf.task_serializer == "auth" and app.conf.accept_content == ["auth"]
    assert app.control.mailbox.serializer == "auth"  # enable_events, revoke …: signed like any task


@pytest.mark.parametrize("outage_s", [0, 2, 30, 60])
def test_a_message_is_tried_again_through_a_broker_outage_of_broker_outage_s(monkeypatch, outage_s):
    # Counted by kombu's own retry loop, the one a publish goes through, with its pauses summed, not slept.
    import kombu.utils.functional

    slept: list[float] = []
    monkeypatch.setattr(kombu.utils.functional, "sleep", slept.append)
    policy = celery_config(Settings(broker_url="redis://127.0.0.1:6390/0",
                                    broker_outage_s=outage_s))["task_publish_retry_policy"]

    def refused() -> None:
        raise ConnectionRefusedError

    with pytest.raises(ConnectionRefusedError):
        kombu.utils.functional.retry_over_time(refused, ConnectionRefusedError, **policy)
    assert outage_s <= sum(slept) <= outage_s + 1
