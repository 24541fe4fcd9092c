"""Keys and certificates the tests make with ``openssl``: signing identities and TLS servers' CAs."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.integration.support.servers import need


@dataclass(frozen=True)
class Identity:
    """A private key and its certificate (PEM files)."""

    key: Path
    certificate: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run([need("openssl"), *args], cwd=cwd, check=True, capture_output=True, timeout=120)


def self_signed(folder: Path, name: str, days: int = 2) -> Identity:
    """An RSA key and a self-signed certificate for it (CN=``name``): what message signing uses."""
    folder.mkdir(parents=True, exist_ok=True)
    key, certificate = folder / f"{name}.key", folder / f"{name}.pem"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", str(days), "-subj", f"/CN={name}",
             "-keyout", str(key), "-out", str(certificate), cwd=folder)
    key.chmod(0o600)
    return Identity(key, certificate)


def signed_by(ca: Identity, folder: Path, name: str, alt_names: str = "IP:127.0.0.1,DNS:localhost") -> Identity:
    """A key and a certificate for ``name`` signed by ``ca``, valid for ``alt_names``: a TLS server's or client's."""
    folder.mkdir(parents=True, exist_ok=True)
    key, request, certificate = folder / f"{name}.key", folder / f"{name}.csr", folder / f"{name}.pem"
    extensions = folder / f"{name}.ext"
    extensions.write_text(f"subjectAltName={alt_names}\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", str(key), "-out",
             str(request), cwd=folder)
    _openssl("x509", "-req", "-in", str(request), "-CA", str(ca.certificate), "-CAkey", str(ca.key),
             "-CAcreateserial", "-days", "2", "-extfile", str(extensions), "-out", str(certificate), cwd=folder)
    key.chmod(0o600)
    return Identity(key, certificate)


def store_of(folder: Path, *identities: Identity) -> Path:
    """A certificate store (a folder) that trusts exactly these identities."""
    folder.mkdir(parents=True, exist_ok=True)
    for identity in identities:
        (folder / identity.certificate.name).write_bytes(identity.certificate.read_bytes())
    return folder


def signing_env(identity: Identity, store: Path) -> dict[str, str]:
    """The FLUKSIO_SIGNING_* variables of a process that signs as ``identity`` and trusts ``store``."""
    return {"FLUKSIO_SIGNING_KEY": str(identity.key), "FLUKSIO_SIGNING_CERTIFICATE": str(identity.certificate),
            "FLUKSIO_SIGNING_CERT_STORE": str(store)}
