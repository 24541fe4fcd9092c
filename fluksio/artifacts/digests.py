"""Content digests, ``<algorithm>:<hex>``: the names artifacts are stored, referenced and checked under.

Two algorithms name artifacts, both 256-bit and collision resistant:

* ``sha256`` names what a node makes itself, ``Artifact.from_bytes`` and ``from_path``: what
  ``sha256sum`` prints for the same file.
* ``blake3`` names the values codecs write (arrays, frames, bytes). A value's digest is on the way of
  every hop it makes, and BLAKE3 takes a third of SHA-256's time even where the CPU has SHA extensions
  (200 MiB: 51 ms against 170 ms on the benchmark host). ``b3sum`` prints it.

A store keeps each algorithm's files in a folder of its own (``sha256/ab/…``, ``blake3/ab/…``) and
every reader takes the hasher from the digest's prefix, so artifacts of both kinds live side by side.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import blake3

from fluksio.errors import ArtifactError


class Hasher(Protocol):
    def update(self, data: bytes | bytearray | memoryview, /) -> object: ...

    def hexdigest(self) -> str: ...


#: The algorithms a digest may name, each with the hasher that makes it.
ALGORITHMS: dict[str, Callable[[], Hasher]] = {"sha256": hashlib.sha256, "blake3": blake3.blake3}
#: What names an artifact a node makes itself.
ARTIFACT_ALGORITHM = "sha256"
#: What names a value a codec writes.
VALUE_ALGORITHM = "blake3"
#: Every digest form accepted anywhere; checked before a digest touches a path.
DIGEST_PATTERN = re.compile(r"(?:sha256|blake3):[0-9a-f]{64}")
#: The form, as an error message says it.
DIGEST_FORM = "'sha256:' or 'blake3:' followed by 64 lowercase hex characters"
#: Bytes read per step when a file is digested.
READ_BYTES = 8 << 20


def validate_digest(digest: Any) -> str:
    if not isinstance(digest, str) or not DIGEST_PATTERN.fullmatch(digest):
        raise ArtifactError(f"{digest!r} is not an artifact digest; expected {DIGEST_FORM}")
    return digest


def looks_like_digest(value: Any) -> bool:
    """A string that means to be a digest (it starts with an algorithm's prefix), valid or not."""
    return isinstance(value, str) and value.split(":", 1)[0] in ALGORITHMS and ":" in value


def hasher_for(digest: str) -> tuple[str, Hasher]:
    """The algorithm ``digest`` names and a fresh hasher of it: what checks bytes against the digest."""
    algorithm = validate_digest(digest).split(":", 1)[0]
    return algorithm, ALGORITHMS[algorithm]()


def digest_of(data: bytes, algorithm: str = ARTIFACT_ALGORITHM) -> str:
    hasher = ALGORITHMS[algorithm]()
    hasher.update(data)
    return f"{algorithm}:{hasher.hexdigest()}"


def file_digest(path: Path, algorithm: str = ARTIFACT_ALGORITHM) -> str:
    """The digest of the file at ``path``, read in pieces (memory stays flat for any size)."""
    hasher = ALGORITHMS[algorithm]()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(READ_BYTES), b""):
            hasher.update(chunk)
    return f"{algorithm}:{hasher.hexdigest()}"


def relative_path(digest: str) -> str:
    """Where a store keeps the bytes of ``digest``, below its root: ``<algorithm>/<ab>/<hex>``."""
    algorithm, hexpart = validate_digest(digest).split(":", 1)
    return f"{algorithm}/{hexpart[:2]}/{hexpart}"
