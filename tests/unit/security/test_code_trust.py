"""Which shipped code a worker runs (FLUKSIO_ACCEPT_CODE): each refusal one line saying what to change where;
code signatures bound to their package and to a trusted certificate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fluksio import ConfigError, Settings
from fluksio.errors import MessageRefused
from fluksio.messages import NodeCall
from fluksio.schemas import Grant
from fluksio.security.code_trust import code_refusal, require_code_trust
from fluksio.security.signatures import Signer, load_signer
from tests.certs import Identity, self_signed, store_of

DIGEST = "sha256:" + "ab12" * 16
OTHER = "sha256:" + "cd34" * 16


@pytest.fixture(scope="module")
def ids(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Identity]:
    folder = tmp_path_factory.mktemp("ids")
    return {name: self_signed(folder, name) for name in ("worker", "submitter", "stranger")}


def settings_of(identity: Identity, store: Path, **more: object) -> Settings:
    return Settings(signing_key=identity.key, signing_certificate=identity.certificate, signing_cert_store=store,
                    **more)


def signer_of(identity: Identity, store: Path) -> Signer:
    signer = load_signer(settings_of(identity, store))
    assert signer is not None
    return signer


@pytest.fixture
def worker(ids: dict[str, Identity], tmp_path: Path) -> Signer:
    """A worker that trusts itself and the submitter, not the stranger."""
    return signer_of(ids["worker"], store_of(tmp_path / "trusted", ids["worker"], ids["submitter"]))


@pytest.fixture
def submitter(ids: dict[str, Identity], tmp_path: Path) -> Signer:
    return signer_of(ids["submitter"], store_of(tmp_path / "submitter", ids["submitter"]))


def call_of(signature: str | None = None, digest: str = DIGEST) -> NodeCall:
    return NodeCall(call_id="R.fit.1", run_id="R", flow="train", node="fit", attempt=1, inputs={},
                    grant=Grant(id="R.fit.1", machine="box1", cpus=1), code_digest=digest, code_entry="flows.py",
                    code_signature=signature)


def test_registered_refuses_any_shipped_package_saying_how_to_accept_it() -> None:
    refusal = code_refusal(Settings(), None, call_of())
    assert refusal == (
        "machine box1 runs only the flows FLUKSIO_FLOWS loads (FLUKSIO_ACCEPT_CODE=registered), and flow 'train' of "
        "run R came with code package sha256:ab12ab12ab12…, which it does not hold; set FLUKSIO_ACCEPT_CODE=signed "
        "(or any) on box1 (`fluksio worker --accept-code signed`) to run shipped code, or restart it on the same code")


def test_any_runs_every_package_signed_or_not(submitter: Signer) -> None:
    assert code_refusal(Settings(accept_code="any"), None, call_of()) is None
    assert code_refusal(Settings(accept_code="any"), None, call_of(submitter.sign_code(DIGEST, "flows.py"))) is None


def test_signed_runs_a_package_signed_by_a_trusted_certificate(worker: Signer, submitter: Signer) -> None:
    signed = call_of(submitter.sign_code(DIGEST, "flows.py"))
    assert code_refusal(Settings(accept_code="signed"), worker, signed) is None


def test_signed_refuses_an_unsigned_package_naming_the_setting_and_how_to_sign(worker: Signer) -> None:
    refusal = code_refusal(Settings(accept_code="signed"), worker, call_of())
    assert refusal is not None and "\n" not in refusal
    assert refusal.startswith("machine box1 runs shipped code only when signed by a certificate it trusts "
                              "(FLUKSIO_ACCEPT_CODE=signed), and flow 'train' of run R came with code package "
                              "sha256:ab12ab12ab12…, unsigned")
    assert "FLUKSIO_SIGNING_KEY, FLUKSIO_SIGNING_CERTIFICATE and FLUKSIO_SIGNING_CERT_STORE" in refusal
    assert str(worker.store_path) in refusal


def test_signed_refuses_a_signature_by_a_certificate_it_does_not_trust(worker: Signer, ids: dict[str, Identity],
                                                                     tmp_path: Path) -> None:
    stranger = signer_of(ids["stranger"], store_of(tmp_path / "stranger", ids["stranger"]))
    refusal = code_refusal(Settings(accept_code="signed"), worker, call_of(stranger.sign_code(DIGEST, "flows.py")))
    assert refusal is not None and "\n" not in refusal
    assert f"signed by the certificate {stranger.identity!r}, which is not among the trusted ones in " \
           f"{worker.store_path}" in refusal


def test_signed_refuses_a_signature_over_another_package(worker: Signer, submitter: Signer) -> None:
    refusal = code_refusal(Settings(accept_code="signed"), worker, call_of(submitter.sign_code(OTHER, "flows.py")))
    assert refusal is not None and f"signed for another code package ({OTHER})" in refusal


def test_signed_refuses_a_signature_that_does_not_verify(worker: Signer, submitter: Signer) -> None:
    forged = json.loads(submitter.sign_code(OTHER, "flows.py"))
    forged["message"] = DIGEST  # another package's signature, relabelled
    refusal = code_refusal(Settings(accept_code="signed"), worker, call_of(json.dumps(forged)))
    assert refusal is not None and "the signature does not verify for entry 'flows.py' (forged, or altered on " \
        "the way)" in refusal
    assert "not a fluksio code signature" in (code_refusal(Settings(accept_code="signed"), worker,
                                                           call_of("garbage")) or "")


def test_signed_refuses_a_signed_digest_written_beside_another_entry(worker: Signer, submitter: Signer) -> None:
    """Whoever can write the run store cannot keep a trusted signature and name another file to import."""
    call = call_of(submitter.sign_code(DIGEST, "flows.py"))
    relabelled = NodeCall.from_wire({**call.to_wire(), "code_entry": "/tmp/evil.py"})
    refusal = code_refusal(Settings(accept_code="signed"), worker, relabelled)
    assert refusal is not None and "does not verify for entry '/tmp/evil.py'" in refusal


def test_a_code_signature_never_opens_as_an_inbox_message(submitter: Signer) -> None:
    """Both envelopes look alike; what is signed starts with its purpose, so neither verifies as the other."""
    with pytest.raises(MessageRefused, match="does not verify"):
        submitter.open("R", json.loads(submitter.sign_code(DIGEST, "flows.py")))
    with pytest.raises(MessageRefused, match="does not verify"):  # it trusts itself: only the purpose differs
        submitter.verify_code(DIGEST, "flows.py", submitter.seal("R", DIGEST))


def test_a_worker_accepting_signed_code_needs_the_signing_settings(ids: dict[str, Identity], tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="FLUKSIO_ACCEPT_CODE=signed runs code packages signed by a certificate "
                                          "this worker trusts, and it has none to check with: set "
                                          "FLUKSIO_SIGNING_KEY"):
        require_code_trust(Settings(accept_code="signed"))
    require_code_trust(settings_of(ids["worker"], store_of(tmp_path / "s", ids["worker"]), accept_code="signed"))
    require_code_trust(Settings(accept_code="any"))
    require_code_trust(Settings())
