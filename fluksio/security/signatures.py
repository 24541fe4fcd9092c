"""Signatures on what fluksio moves outside Celery: the messages on a run's inbox, and code packages.

With the ``FLUKSIO_SIGNING_*`` settings, Celery signs every task message (its ``auth`` serializer; see
fluksio/security/celery_signing.py). Completions, cancels, wake-ups and child ends travel on Redis lists instead,
so they are signed here, with the same key and checked against the same trusted certificates, in the
same way Celery does it (RSA-PSS over SHA-256; a certificate is known by its issuer and serial number).

What is signed binds a message to its run: ``fluksio-inbox/1``, the run id and the message's exact JSON
text. A message copied onto another run's inbox no longer verifies there; one without a signature, or
signed by a certificate this process does not trust, is refused (:class:`~fluksio.errors.MessageRefused`)
and the inbox drops it with a log line, never handing it to a driver.

A code package shipped with a run (flows/package.py) is signed by its submitter over ``fluksio-code/1`` and
its digest (:meth:`Signer.sign_code`); a worker that runs only signed code checks it (:meth:`Signer.verify_code`,
fluksio/security/code_trust.py).

Each process loads the files once (:func:`load_signer`); a mistake in them is a
:class:`~fluksio.errors.ConfigError` naming the file, at start.
"""

from __future__ import annotations

import base64
import glob
import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fluksio.errors import ConfigError, MessageRefused

if TYPE_CHECKING:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey, RSAPublicKey

    from fluksio.settings import Settings

#: What every signature covers first: the purpose and version of the scheme, so that a signature made
#: for something else (a Celery message, another version's inbox) never verifies as an inbox message.
PURPOSE = b"fluksio-inbox/1\n"
#: What a code signature covers first (then the code package's digest): a signature over an inbox message
#: never verifies as one over code, nor the other way round.
CODE_PURPOSE = b"fluksio-code/1\n"
#: The fields of a signed message on the wire, and nothing else.
ENVELOPE_FIELDS = frozenset({"signed_by", "signature", "message"})


def certificate_id(certificate: x509.Certificate) -> str:
    """How Celery names a certificate in a signed message: its issuer's values and its serial number."""
    return f"{' '.join(str(attribute.value) for attribute in certificate.issuer)} {certificate.serial_number}"


def is_envelope(data: Any) -> bool:
    """Whether ``data`` (a JSON object read off an inbox) is a signed message."""
    return isinstance(data, dict) and "signature" in data and "signed_by" in data


@dataclass(frozen=True)
class Signer:
    """This process's key and certificate, and the public keys of the certificates it trusts (by
    :func:`certificate_id`)."""

    key: RSAPrivateKey
    certificate: x509.Certificate
    trusted: dict[str, RSAPublicKey]
    #: Where they were read from, for messages.
    key_path: Path
    certificate_path: Path
    store_path: Path

    @property
    def identity(self) -> str:
        return certificate_id(self.certificate)

    def trusts(self, identity: str) -> bool:
        return identity in self.trusted

    def seal(self, run_id: str, text: str) -> str:
        """The signed message for run ``run_id`` whose JSON text is ``text``, as JSON text."""
        signature = self.key.sign(_signed_bytes(run_id, text), *_scheme())
        return json.dumps({"signed_by": self.identity, "signature": base64.b64encode(signature).decode(),
                           "message": text})

    def open(self, run_id: str, data: Any) -> str:
        """The JSON text of the message ``data`` (a JSON object from run ``run_id``'s inbox) carries, if a
        certificate this process trusts signed it for that run; else :class:`MessageRefused` saying why."""
        from cryptography.exceptions import InvalidSignature

        if not is_envelope(data):
            raise MessageRefused(f"an unsigned message, and this installation signs its messages: {data!r:.200}")
        if set(data) != ENVELOPE_FIELDS or not all(isinstance(data[field], str) for field in ENVELOPE_FIELDS):
            raise MessageRefused(f"a signed message must have exactly the string fields "
                                 f"{', '.join(sorted(ENVELOPE_FIELDS))}: {data!r:.200}")
        public_key = self.trusted.get(data["signed_by"])
        if public_key is None:
            raise MessageRefused(f"a message signed by the certificate {data['signed_by']!r}, which is not among "
                                 f"the trusted ones in {self.store_path}")
        try:
            signature = base64.b64decode(data["signature"], validate=True)
            public_key.verify(signature, _signed_bytes(run_id, data["message"]), *_scheme())
        except (InvalidSignature, ValueError):
            raise MessageRefused(f"a message whose signature does not verify for run {run_id} (signed for "
                                 "another run, or altered on the way)") from None
        return str(data["message"])

    def sign_code(self, digest: str, entry: str) -> str:
        """The submitter's signature over the code package ``digest`` (``sha256:…``) and what a worker imports
        from it (``entry``: a module, or a file's path in the package), as JSON text: the same envelope as
        :meth:`seal` makes, so that a worker can say which certificate signed it. The entry is signed too: a
        signed digest with another entry written beside it in the run store would import something else."""
        signature = self.key.sign(_code_bytes(digest, entry), *_scheme())
        return json.dumps({"signed_by": self.identity, "signature": base64.b64encode(signature).decode(),
                           "message": digest})

    def verify_code(self, digest: str, entry: str, signature: str) -> None:
        """Return if ``signature`` (what :meth:`sign_code` made) is a trusted certificate's over the code package
        ``digest`` and its ``entry``; else :class:`MessageRefused` saying why, in words that follow "the package
        was …"."""
        from cryptography.exceptions import InvalidSignature

        try:
            data = json.loads(signature)
        except ValueError:
            raise MessageRefused("signed with something that is not a fluksio code signature") from None
        if (not is_envelope(data) or set(data) != ENVELOPE_FIELDS
                or not all(isinstance(data[field], str) for field in ENVELOPE_FIELDS)):
            raise MessageRefused("signed with something that is not a fluksio code signature")
        if data["message"] != digest:
            # A signature copied from another package onto this one: it says which package it is for.
            raise MessageRefused(f"signed for another code package ({data['message']:.80})")
        public_key = self.trusted.get(data["signed_by"])
        if public_key is None:
            raise MessageRefused(f"signed by the certificate {data['signed_by']!r}, which is not among the trusted "
                                 f"ones in {self.store_path}")
        try:
            public_key.verify(base64.b64decode(data["signature"], validate=True), _code_bytes(digest, entry),
                              *_scheme())
        except (InvalidSignature, ValueError):
            raise MessageRefused(f"signed in the name of {data['signed_by']!r}, and the signature does not verify "
                                 f"for entry {entry!r} (forged, or altered on the way)") from None


def _code_bytes(digest: str, entry: str) -> bytes:
    return CODE_PURPOSE + digest.encode() + b"\n" + entry.encode()


def _signed_bytes(run_id: str, text: str) -> bytes:
    return PURPOSE + run_id.encode() + b"\n" + text.encode()


def _scheme() -> tuple[Any, Any]:
    """RSA-PSS with SHA-256, as Celery's ``auth`` serializer signs."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    return padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=padding.PSS.MAX_LENGTH), hashes.SHA256()


def load_signer(settings: Settings) -> Signer | None:
    """The signer of the settings' key, certificate and store; ``None`` when signing is off.

    Raises :class:`ConfigError` naming the file for a key, certificate or store that cannot be used: missing,
    not PEM, not RSA (Celery signs with RSA only), a key that is not the certificate's, an expired certificate.
    """
    if not settings.signing:
        return None
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey, RSAPublicKey
    except ImportError:
        raise ConfigError("message signing (FLUKSIO_SIGNING_*) needs the Python package 'cryptography': "
                          "pip install 'fluksio[signing]'") from None
    assert settings.signing_key and settings.signing_certificate and settings.signing_cert_store
    key_path, cert_path, store_path = settings.signing_key, settings.signing_certificate, settings.signing_cert_store
    try:
        key = serialization.load_pem_private_key(_read(key_path, "FLUKSIO_SIGNING_KEY"), password=None)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"FLUKSIO_SIGNING_KEY={key_path} is not an unencrypted PEM private key: {exc}") from None
    if not isinstance(key, RSAPrivateKey):
        raise ConfigError(f"FLUKSIO_SIGNING_KEY={key_path} is a {type(key).__name__}; Celery signs with RSA keys only "
                          "(openssl req -x509 -newkey rsa:3072 …)")
    certificate = _certificates(cert_path, "FLUKSIO_SIGNING_CERTIFICATE")[0]
    if certificate.public_key() != key.public_key():
        raise ConfigError(f"FLUKSIO_SIGNING_KEY={key_path} is not the key of FLUKSIO_SIGNING_CERTIFICATE={cert_path}")
    trusted: dict[str, RSAPublicKey] = {}
    for path in _store_files(store_path):
        # One certificate per file, the first: what Celery's store reads, so both trust the same ones.
        found = _certificates(path, "FLUKSIO_SIGNING_CERT_STORE")[0]
        public_key = found.public_key()
        if not isinstance(public_key, RSAPublicKey):
            raise ConfigError(f"FLUKSIO_SIGNING_CERT_STORE: the certificate in {path} is not an RSA one; Celery "
                              "signs with RSA keys only")
        trusted[certificate_id(found)] = public_key
    return Signer(key=key, certificate=certificate, trusted=trusted, key_path=key_path, certificate_path=cert_path,
                  store_path=store_path)


def _read(path: Path, setting: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{setting}={path}: cannot read it ({exc.strerror or exc})") from None


def _certificates(path: Path, setting: str) -> list[x509.Certificate]:
    """The PEM certificates in one file; an expired one is an error (Celery refuses to load it too)."""
    from cryptography import x509

    try:
        found = x509.load_pem_x509_certificates(_read(path, setting))
    except ValueError as exc:
        raise ConfigError(f"{setting}: {path} is not a PEM certificate: {exc}") from None
    now = datetime.now(timezone.utc)
    for certificate in found:
        if certificate.not_valid_after_utc <= now:
            raise ConfigError(f"{setting}: the certificate in {path} expired on "
                              f"{certificate.not_valid_after_utc:%Y-%m-%d %H:%M} UTC; renew it")
    return found


def _store_files(store: Path) -> list[Path]:
    """The files of a certificate store: every file of a folder, or what a file name or glob names."""
    if store.is_dir():
        paths = sorted(p for p in store.iterdir() if p.is_file() and not p.name.startswith("."))
    else:
        paths = [Path(p) for p in sorted(glob.glob(os.fspath(store)))]
    if not paths:
        raise ConfigError(f"FLUKSIO_SIGNING_CERT_STORE={store} holds no certificates: put the PEM certificate of "
                          "every process whose messages this one accepts there (its own too)")
    return paths
