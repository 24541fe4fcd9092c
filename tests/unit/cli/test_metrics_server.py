"""`fluksio metrics-server` says in one line what it needs when prometheus-client is missing, and starts nothing.
(Serving a live installation, scraped by a real Prometheus, is tests/integration/test_prometheus.py.)"""

from __future__ import annotations

import sys

import pytest
from click.testing import CliRunner

from fluksio.cli.main import cli


def test_it_is_listed_among_the_commands() -> None:
    listing = CliRunner().invoke(cli, ["--help"]).output
    assert "metrics-server" in listing
    usage = CliRunner().invoke(cli, ["metrics-server", "--help"]).output
    assert "--port" in usage and "--host" in usage and "127.0.0.1" in usage


def test_without_prometheus_client_it_says_what_to_install_and_exits_2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # what `import` finds when it is not installed
    monkeypatch.setitem(sys.modules, "fluksio.client", None)  # and it must not get as far as connecting
    done = CliRunner().invoke(cli, ["metrics-server", "--port", "0"])
    assert done.exit_code == 2, done.output
    assert "pip install 'fluksio[metrics]'" in done.output and "Traceback" not in done.output
    assert len(done.output.strip().splitlines()) == 1


@pytest.mark.parametrize(("args", "words"), [(["--port", "70000"], "70000"), (["--port", "x"], "'x'")])
def test_a_bad_port_is_refused_before_anything_starts(args: list[str], words: str) -> None:
    done = CliRunner().invoke(cli, ["metrics-server", *args])
    assert done.exit_code == 2 and words in done.output
