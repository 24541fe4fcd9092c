"""Signed inbox messages: bound to their run, refused unsigned, altered or signed by a stranger; the key,
certificate and store are checked as a process starts, each mistake named with its file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fluksio import ConfigError, Settings
from fluksio.broker.inbox.redis import RedisInbox
from fluksio.errors import MessageRefused
from fluksio.messages import Cancel, Completion
from fluksio.security.signatures import Signer, load_signer
from fluksio.security.trust import Peer, disagreements
from tests.certs import Identity, self_signed, store_of


@pytest.fixture(scope="module")
def ids(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Identity]:
    folder = tmp_path_factory.mktemp("ids")
    return {name: self_signed(folder, name) for name in ("ours", "theirs")}


def signer_of(identity: Identity, store: Path) -> Signer:
    signer = load_signer(Settings(signing_key=identity.key, signing_certificate=identity.certificate,
                                  signing_cert_store=store))
    assert signer is not None
    return signer


@pytest.fixture
def ours(ids: dict[str, Identity], tmp_path: Path) -> Signer:
    return signer_of(ids["ours"], store_of(tmp_path / "store", ids["ours"]))


TEXT = json.dumps(Completion(call_id="RUN1.n.1", node="n", attempt=1, status="ok", outputs={"y": 1}).to_wire())


def test_a_message_signed_for_a_run_opens_for_that_run_only(ours: Signer) -> None:
    sealed = json.loads(ours.seal("RUN1", TEXT))
    assert set(sealed) == {"signed_by", "signature", "message"} and sealed["signed_by"] == ours.identity
    assert ours.open("RUN1", sealed) == TEXT
    with pytest.raises(MessageRefused, match="does not verify for run RUN2"):
        ours.open("RUN2", sealed)


def test_an_altered_message_does_not_verify(ours: Signer) -> None:
    sealed = json.loads(ours.seal("RUN1", TEXT))
    sealed["message"] = sealed["message"].replace('"y": 1', '"y": 2')
    with pytest.raises(MessageRefused, match="does not verify"):
        ours.open("RUN1", sealed)
    sealed["signature"] = "not base64!"
    with pytest.raises(MessageRefused, match="does not verify"):
        ours.open("RUN1", sealed)


def test_an_unsigned_message_and_a_strangers_are_refused(ours: Signer, ids: dict[str, Identity],
                                                        tmp_path: Path) -> None:
    with pytest.raises(MessageRefused, match="an unsigned message"):
        ours.open("RUN1", json.loads(TEXT))
    stranger = signer_of(ids["theirs"], store_of(tmp_path / "theirs", ids["theirs"]))
    with pytest.raises(MessageRefused, match="not among the trusted ones"):
        ours.open("RUN1", json.loads(stranger.seal("RUN1", TEXT)))
    with pytest.raises(MessageRefused, match="exactly the string fields"):
        ours.open("RUN1", {**json.loads(ours.seal("RUN1", TEXT)), "extra": 1})


class ListRedis:
    """The few list commands RedisInbox uses to push, and a way to read back what it pushed."""

    def __init__(self) -> None:
        self.lists: dict[str, list[bytes]] = {}

    def register_script(self, script: str) -> None:
        return None

    def pipeline(self, transaction: bool = True) -> ListRedis:
        return self

    def rpush(self, key: str, value: str) -> None:
        self.lists.setdefault(key, []).append(value.encode())

    def expire(self, key: str, seconds: int) -> None:
        return None

    def execute(self) -> list[None]:
        return []


def test_the_redis_inbox_signs_what_it_pushes_and_drops_what_it_cannot_trust(ours: Signer,
                                                                            caplog: pytest.LogCaptureFixture) -> None:
    client = ListRedis()
    inbox = RedisInbox(client, ours)
    inbox.push("RUN1", Cancel())
    raw = client.lists["fluksio:inbox:RUN1"][0]
    assert b"signature" in raw
    assert inbox._read("RUN1", raw) == Cancel()
    assert inbox._read("RUN2", raw) is None  # copied onto another run's inbox
    assert inbox._read("RUN1", TEXT.encode()) is None  # unsigned
    assert "dropping a message on its inbox that fluksio did not send: an unsigned message" in caplog.text
    # A process without the signing settings says why it cannot read a signed message.
    assert RedisInbox(client)._read("RUN1", raw) is None
    assert "a signed message, and this process checks no signatures" in caplog.text


def test_a_key_that_is_not_the_certificates_is_refused_naming_both(ids: dict[str, Identity], tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not the key of FLUKSIO_SIGNING_CERTIFICATE"):
        load_signer(Settings(signing_key=ids["theirs"].key, signing_certificate=ids["ours"].certificate,
                             signing_cert_store=store_of(tmp_path / "s", ids["ours"])))


def test_an_empty_store_and_a_file_that_is_no_certificate_are_named(ids: dict[str, Identity], tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="holds no certificates"):
        signer_of(ids["ours"], tmp_path / "empty")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.txt").write_text("hello")
    with pytest.raises(ConfigError, match="notes.txt is not a PEM certificate"):
        signer_of(ids["ours"], tmp_path / "junk")
    with pytest.raises(ConfigError, match="FLUKSIO_SIGNING_KEY=.*cannot read it"):
        load_signer(Settings(signing_key=tmp_path / "missing.key", signing_certificate=ids["ours"].certificate,
                             signing_cert_store=tmp_path / "junk"))


def test_an_expired_certificate_in_the_store_is_refused(ids: dict[str, Identity], tmp_path: Path) -> None:
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "old")])
    now = datetime.datetime.now(datetime.timezone.utc)
    old = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
           .serial_number(1).not_valid_before(now - datetime.timedelta(days=10))
           .not_valid_after(now - datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    store = store_of(tmp_path / "store", ids["ours"])
    (store / "old.pem").write_bytes(old.public_bytes(serialization.Encoding.PEM))
    with pytest.raises(ConfigError, match="old.pem expired on"):
        signer_of(ids["ours"], store)


def test_disagreements_name_who_refuses_whom(ours: Signer, ids: dict[str, Identity], tmp_path: Path) -> None:
    theirs = signer_of(ids["theirs"], store_of(tmp_path / "t", ids["theirs"]))
    peers = [Peer("drivers@a", theirs.identity, frozenset({theirs.identity}), 0.0),
             Peer("nodes@b", ours.identity, frozenset({ours.identity}), 0.0)]
    problems = disagreements("nodes@new", ours, peers)
    assert len(problems) == 2
    assert problems[0].startswith("drivers@a does not trust the certificate nodes@new signs with")
    assert problems[1].startswith("nodes@new does not trust the certificate drivers@a signs with")
    lonely = signer_of(ids["ours"], store_of(tmp_path / "only-theirs", ids["theirs"]))
    assert "does not trust its own certificate" in disagreements("nodes@x", lonely, [])[0]
