"""Errors a command meets after it started are said in one sentence too: a subscription Redis never
confirms, a closed client."""

from __future__ import annotations

import logging
import threading
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from click.testing import CliRunner

from fluksio import connect
from fluksio.broker.events.memory import MemoryEvents
from fluksio.cli.main import cli
from fluksio.errors import ClientClosed, EventsUnavailable, FluksioError
from fluksio.outage import LOGGER
from fluksio.settings import Settings

HELLO = Path(__file__).resolve().parents[3] / "examples" / "hello.py"


def test_fluksio_run_says_an_unconfirmed_subscription_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def unconfirmed(_events: MemoryEvents, _callback: object) -> None:
        raise EventsUnavailable("the broker at h:6379 did not confirm the subscription to fluksio:events within 10 s")

    monkeypatch.setattr(MemoryEvents, "subscribe", unconfirmed)
    monkeypatch.chdir(tmp_path)
    outage = logging.getLogger(LOGGER)  # the command shows outage notices on the terminal: not after this test
    monkeypatch.setattr(outage, "handlers", list(outage.handlers))
    monkeypatch.setattr(outage, "level", outage.level)
    done = CliRunner().invoke(cli, ["run", str(HELLO), "-p", "name=ada"])
    assert done.exit_code == 2, done.output
    assert done.output == ("error: the broker at h:6379 did not confirm the subscription to fluksio:events "
                           "within 10 s\n")
    assert done.exception is None or isinstance(done.exception, SystemExit)


def test_a_closed_client_refuses_with_a_fluksio_error(tmp_path: Path) -> None:
    client = connect(Settings(database_url=f"sqlite:///{tmp_path / 'runs.db'}", artifacts_dir=tmp_path / "a",
                              cpus=1))
    client.close()
    with pytest.raises(ClientClosed, match=r"client is closed; call fluksio.connect\(\) again") as info:
        client.submit(str(HELLO), {"name": "ada"})
    assert isinstance(info.value, FluksioError) and not isinstance(info.value, RuntimeError)


def test_every_call_on_a_closed_client_is_refused(tmp_path: Path) -> None:
    client = connect(Settings(database_url=f"sqlite:///{tmp_path / 'runs.db'}", artifacts_dir=tmp_path / "a",
                              cpus=1))
    run_id = client.submit(str(HELLO), {"name": "ada"}).wait(timeout=60).id
    client.close()
    calls = {
        "get": lambda: client.get(run_id), "handle": lambda: client.handle(run_id), "runs": client.runs,
        "output": lambda: client.output(run_id, "greeting"), "metrics": lambda: client.metrics(run_id),
        "cancel": lambda: client.cancel(run_id), "placement": client.placement, "resume": lambda: client.resume(run_id),
        "sweep": lambda: client.sweep(str(HELLO), {"name": ["a", "b"]}),
    }
    for name, call in calls.items():
        with pytest.raises(ClientClosed):
            call()
            pytest.fail(f"client.{name} worked on a closed client")


def test_ctrl_c_whose_cancel_is_slow_to_land_ends_with_a_line_not_a_traceback(capsys) -> None:
    from fluksio.cli.main import _wait_live
    from fluksio.runs.ends import RunEnds

    class Interrupted:
        id = "01SLOW"

        def wait(self, timeout: float) -> None:
            raise TimeoutError(f"run 01SLOW is still running after {timeout:g} s")

    class Client:
        cancelled: list[str] = []
        ends = RunEnds()

        def watch_end(self, run_id: str) -> AbstractContextManager[threading.Event]:
            return self.ends.watch(run_id)

        def get(self, run_id: str) -> None:
            raise KeyboardInterrupt  # Ctrl-C while the command shows the run

        def cancel(self, run_id: str, reason: str) -> None:
            self.cancelled.append(reason)

    client = Client()
    with pytest.raises(KeyboardInterrupt):  # the commands turn it into exit status 130
        _wait_live(client, Interrupted(), total=1, timeout=None, quiet=True)  # type: ignore[arg-type]
    assert client.cancelled == ["interrupted at the terminal (Ctrl-C)"]
    said = capsys.readouterr().err
    assert "cancelling run 01SLOW" in said and "run 01SLOW is still stopping; `fluksio show 01SLOW`" in said
