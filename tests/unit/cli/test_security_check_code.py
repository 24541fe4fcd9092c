"""`fluksio security check` says which shipped code the workers run (FLUKSIO_ACCEPT_CODE), in one line."""

from __future__ import annotations

from pathlib import Path

from fluksio import Settings
from fluksio.cli.security import FAIL, INFO, OK, WARN, code_finding
from tests.certs import self_signed, store_of

BROKER = "redis://127.0.0.1:6379/0"


def test_registered_is_the_safe_default() -> None:
    finding = code_finding(Settings(broker_url=BROKER))
    assert finding.verdict == OK and finding.detail.startswith("registered: workers run only the flows FLUKSIO_FLOWS")


def test_any_is_a_warning_that_says_who_can_run_code() -> None:
    finding = code_finding(Settings(broker_url=BROKER, accept_code="any"))
    assert finding.verdict == WARN and "anyone who can write your Redis can run code here" in finding.detail
    assert code_finding(Settings(accept_code="any")).verdict == INFO  # embedded: nobody else writes its broker


def test_signed_needs_the_signing_settings(tmp_path: Path) -> None:
    assert code_finding(Settings(broker_url=BROKER, accept_code="signed")).verdict == FAIL
    me = self_signed(tmp_path, "me")
    store = store_of(tmp_path / "store", me)
    finding = code_finding(Settings(broker_url=BROKER, accept_code="signed", signing_key=me.key,
                                    signing_certificate=me.certificate, signing_cert_store=store))
    assert finding.verdict == OK and str(store) in finding.detail
