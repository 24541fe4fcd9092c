"""A worker's secrets: found in its environment or its secrets folder (owner-only files), handed to the node,
and kept out of what the node logs, raises and returns."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from fluksio import Flow, Secret, Settings
from fluksio.errors import NodeFailed
from fluksio.execution.call import execute_call
from fluksio.execution.secrets import hidden, redact, resolve
from fluksio.placement.placer import Request
from fluksio.runtime import Runtime
from fluksio.schemas import Inventory, Resources

VALUE = "s3cr3t-value-of-the-token"


def test_the_environment_comes_first_then_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "API_KEY").write_text("from-the-file\n")
    (tmp_path / "API_KEY").chmod(0o600)
    settings = Settings(secrets_dir=tmp_path)
    assert resolve("API_KEY", settings, "box1", "n").value == "from-the-file"  # one trailing newline dropped
    monkeypatch.setenv("FLUKSIO_SECRET_API_KEY", "from-the-env")
    assert resolve("API_KEY", settings, "box1", "n").value == "from-the-env"


def test_a_file_others_may_read_is_refused_with_the_fix(tmp_path: Path) -> None:
    (tmp_path / "API_KEY").write_text(VALUE)
    (tmp_path / "API_KEY").chmod(0o640)
    with pytest.raises(NodeFailed) as refused:
        resolve("API_KEY", Settings(secrets_dir=tmp_path), "box1", "fetch")
    assert f"mode 0640); a secret's file must be its owner's only: chmod 600 {tmp_path / 'API_KEY'}" in str(
        refused.value)
    assert VALUE not in str(refused.value)


def test_a_missing_secret_names_itself_the_machine_and_where_to_put_it(tmp_path: Path) -> None:
    with pytest.raises(NodeFailed) as missing:
        resolve("API_KEY", Settings(secrets_dir=tmp_path), "box1", "fetch")
    message = str(missing.value)
    assert "node 'fetch' needs the secret 'API_KEY', which machine box1 does not have" in message
    assert "FLUKSIO_SECRET_API_KEY" in message and str(tmp_path / "API_KEY") in message


def test_redact_hides_every_value_longest_first() -> None:
    assert redact("a abc abcd", ["abc", "abcd"]) == "a *** ***"
    assert redact(None, ["x"]) is None and redact("keep", []) == "keep"


def test_log_records_made_while_a_secret_is_held_are_redacted(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("test.secrets")
    with caplog.at_level(logging.INFO):
        with hidden([VALUE]):
            log.info("token is %s", VALUE)
        log.info("after: %s", VALUE)  # no longer held: nothing to hide it from (it is the test's own string)
    assert caplog.records[0].getMessage() == "token is ***"
    assert caplog.records[1].getMessage() == f"after: {VALUE}"


def runtime_with_a_secret_flow(tmp_path: Path) -> tuple[Runtime, Flow]:
    runtime = Runtime.standalone(Settings(database_url=f"sqlite:///{tmp_path / 'db'}",
                                          artifacts_dir=tmp_path / "artifacts"))
    runtime.db.upgrade()
    runtime.machine = "m"
    runtime.placer.attach(Inventory(name="m", cpus=1))
    flow = Flow("secretive", inputs={"token": Secret, "leak": bool})

    @flow.node(provides="length")
    def use(token: Secret, leak: bool) -> object:
        print("using", token.value)
        logging.getLogger("node").warning("logged %s", token.value)
        if leak:
            return token.value
        return len(token.value)

    @flow.node(provides="nothing")
    def fail(token: Secret) -> None:
        raise RuntimeError(f"bad token {token.value}")

    runtime.registry.register(flow)
    return runtime, flow


def call(runtime: Runtime, node: str, inputs: dict[str, object]) -> object:
    call_id = f"r.{node}.1"
    grant = runtime.placer.try_claim(Request(call_id, Resources(cpus=1)))
    execute_call(runtime, {"call_id": call_id, "run_id": "r", "flow": "secretive", "node": node, "attempt": 1,
                           "inputs": inputs, "grant": grant.model_dump(mode="json")})
    return runtime.inbox.pop("r", timeout=1)


def test_the_node_gets_the_value_and_its_logs_error_and_outputs_carry_none(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLUKSIO_SECRET_TOKEN", VALUE)
    runtime, _ = runtime_with_a_secret_flow(tmp_path)
    done = call(runtime, "use", {"token": "TOKEN", "leak": False})
    assert done.status == "ok" and done.outputs == {"length": len(VALUE)}
    assert "using ***" in done.logs and "logged ***" in done.logs and VALUE not in done.logs
    leaked = call(runtime, "use", {"token": "TOKEN", "leak": True})
    assert leaked.status == "error" and "put the value of a secret into its outputs" in leaked.error
    assert leaked.outputs is None and VALUE not in (leaked.logs or "")
    failed = call(runtime, "fail", {"token": "TOKEN"})
    assert failed.status == "error" and "RuntimeError: bad token ***" in failed.error
    assert VALUE not in failed.error and VALUE not in (failed.logs or "")
    assert os.environ["FLUKSIO_SECRET_TOKEN"] == VALUE


def test_a_worker_without_the_secret_fails_the_node_and_gives_the_grant_back(tmp_path: Path) -> None:
    runtime, _ = runtime_with_a_secret_flow(tmp_path)
    done = call(runtime, "use", {"token": "NOWHERE", "leak": False})
    assert done.status == "error" and "needs the secret 'NOWHERE', which machine m does not have" in done.error
    assert runtime.placer.snapshot()["machines"][0]["free"]["cpus"] == 1
