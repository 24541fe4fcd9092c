"""`fluksio security check`: each thing an installation's safety relies on, read from its settings."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from fluksio import Settings
from fluksio.cli.main import cli
from fluksio.cli.security import FAIL, INFO, OK, WARN, audit
from tests.certs import self_signed, store_of


@pytest.fixture(autouse=True)
def clean_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith(("FLUKSIO_", "AWS_ENDPOINT")):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)


def verdicts(settings: Settings) -> dict[str, tuple[str, str]]:
    return {f.check: (f.verdict, f.detail) for f in audit(settings, ask_broker=False)}


def test_the_embedded_default_relies_on_nothing_that_could_be_wrong() -> None:
    found = verdicts(Settings())
    assert found["pickle"][0] == OK and "accepts only json" in found["pickle"][1]
    assert found["signing"][0] == INFO and found["TLS: broker"][0] == INFO
    assert not any(verdict in (WARN, FAIL) for verdict, _ in found.values())


def test_a_plain_broker_without_signing_is_warned_of_per_connection() -> None:
    found = verdicts(Settings(broker_url="redis://:pw@h:6379/0", result_backend="redis://h:6379/1",
                              database_url="postgresql://u@db/f?sslmode=require"))
    assert found["signing"][0] == WARN and "run registered nodes" in found["signing"][1]
    assert found["TLS: broker"] == (WARN, "redis://:***@h:6379/0: no TLS; its password and every message cross the "
                                          "network readable; use rediss:// in FLUKSIO_BROKER_URL")
    assert found["TLS: result backend"][0] == WARN
    assert found["TLS: run store"][0] == WARN and "sslmode=verify-full" in found["TLS: run store"][1]


def test_verified_tls_everywhere_and_signing_are_ok(tmp_path: Path) -> None:
    me = self_signed(tmp_path / "ids", "me")
    ca = tmp_path / "ca.pem"
    ca.write_bytes(me.certificate.read_bytes())
    found = verdicts(Settings(broker_url=f"rediss://:pw@h:6380/0?ssl_ca_certs={ca}",
                              database_url="postgresql+psycopg://u@db/f?sslmode=verify-full&sslrootcert=/ca.pem",
                              signing_key=me.key, signing_certificate=me.certificate,
                              signing_cert_store=store_of(tmp_path / "store", me)))
    assert found["signing"][0] == OK and "trusts 1 certificate(s)" in found["signing"][1]
    assert found["TLS: broker"] == (OK, f"TLS, server verified against CA {ca}")
    assert found["TLS: run store"][0] == OK


def test_mistakes_fail_a_key_others_read_a_missing_ca_and_an_unverified_server(tmp_path: Path) -> None:
    me = self_signed(tmp_path / "ids", "me")
    me.key.chmod(0o644)
    found = verdicts(Settings(broker_url="rediss://h:6380/0?ssl_ca_certs=/nowhere/ca.pem",
                              result_backend="rediss://h:6380/1?ssl_cert_reqs=none", signing_key=me.key,
                              signing_certificate=me.certificate, signing_cert_store=store_of(tmp_path / "s", me)))
    assert found["signing: key"][0] == FAIL and "chmod 600" in found["signing: key"][1]
    assert found["TLS: broker"] == (FAIL, "ssl_ca_certs=/nowhere/ca.pem in FLUKSIO_BROKER_URL is not a file here")
    assert found["TLS: result backend"][0] == WARN and "ssl_cert_reqs=none" in found["TLS: result backend"][1]


def test_secrets_files_others_may_read_fail_and_values_are_never_shown(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "secrets"
    folder.mkdir(mode=0o700)
    (folder / "GOOD").write_text("good-value")
    (folder / "GOOD").chmod(0o600)
    monkeypatch.setenv("FLUKSIO_SECRET_HF_TOKEN", "env-value")
    assert verdicts(Settings(secrets_dir=folder))["secrets: folder"] == (OK, f"{folder}: 1 file(s), each its "
                                                                            "owner's only")
    (folder / "LOOSE").write_text("loose-value")
    (folder / "LOOSE").chmod(0o644)
    found = verdicts(Settings(secrets_dir=folder))
    assert found["secrets: folder"][0] == FAIL and "LOOSE (0644)" in found["secrets: folder"][1]
    assert found["secrets: environment"] == (INFO, "1 here (HF_TOKEN)")
    assert not any("value" in detail for _, detail in found.values())


def test_the_command_prints_a_table_or_json_and_exits_1_on_a_failure(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    shown = runner.invoke(cli, ["security", "check"])
    assert shown.exit_code == 0 and "pickle" in shown.output and "explorer" in shown.output
    monkeypatch.setenv("FLUKSIO_BROKER_URL", "redis://h:6379/0")
    assert runner.invoke(cli, ["security", "check", "--offline"]).exit_code == 0  # warnings only
    assert runner.invoke(cli, ["security", "check", "--offline", "--strict"]).exit_code == 1
    monkeypatch.setenv("FLUKSIO_SECRETS_DIR", str(tmp_path / "missing"))
    listed = runner.invoke(cli, ["security", "check", "--offline", "--json"])
    assert listed.exit_code == 1
    checks = {entry["check"]: entry["verdict"] for entry in json.loads(listed.output)}
    assert checks["secrets: folder"] == FAIL and checks["signing"] == WARN
