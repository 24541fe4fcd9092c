"""The interface every artifact store implements: content-addressed bytes."""

from __future__ import annotations

import io
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, TypeVar, cast

from fluksio.artifacts.artifact import Artifact
from fluksio.artifacts.hashing import HashingWriter
from fluksio.errors import ArtifactError

T = TypeVar("T")

#: How many times a local copy is fetched when it vanished before it was read.
FETCHES = 2


class ArtifactEvicted(ArtifactError):
    """This host's copy of an artifact was removed each time as soon as it was fetched."""


class ArtifactStore(ABC):
    """Bytes kept under their digest. Digests are validated by every implementation before use.

    Every failure to reach or read the store is an :class:`~fluksio.errors.ArtifactError` naming the digest,
    so a caller (a node call, the run cache, a submit) has one error to handle.
    """

    @abstractmethod
    def put(self, artifact: Artifact) -> Artifact:
        """Store the artifact's bytes (once) and return it bound to this store."""

    @abstractmethod
    def get(self, digest: str) -> bytes:
        """The bytes; :class:`~fluksio.errors.ArtifactError` when they are gone."""

    @abstractmethod
    def exists(self, digest: str) -> bool: ...

    @abstractmethod
    def path(self, digest: str) -> Path:
        """A local file with the bytes."""

    def open(self, digest: str) -> BinaryIO:
        """The bytes as a binary file object to stream from (close it, or use ``with``).

        A backend whose bytes are remote streams them and checks them against the digest as they go:
        reading to the end of a copy that does not match raises :class:`~fluksio.errors.ArtifactError`, so a
        reader that passes bytes on before the end (a download) must drop what it passed on if that happens.
        """
        return io.BytesIO(self.get(digest))

    def check(self) -> None:
        """Raise :class:`~fluksio.errors.ConfigError` if the store cannot be used at all (a missing bucket,
        refused credentials, an endpoint that does not answer). A folder or memory store always can."""

    def put_stream(self, write: Callable[[BinaryIO], None], name: str | None = None,
                   media_type: str = "application/octet-stream") -> Artifact:
        """Store the bytes ``write`` writes into the binary file it is handed, digested as they are written,
        and return the artifact bound to this store (what a codec's value becomes).

        Here: through a temporary file and :meth:`put` (the file is the artifact's source, never read into
        memory whole). A store that can adopt a file it wrote itself does better (the folder store renames it).
        """
        with tempfile.TemporaryDirectory(prefix="fluksio-value-") as scratch:
            path = Path(scratch) / "value"
            with path.open("wb") as raw:
                hashing = HashingWriter(raw)
                write(cast(BinaryIO, hashing))
            return self.put(Artifact(hashing.digest, hashing.size, media_type, name, source=path))

    def bind(self, artifact: Artifact) -> Artifact:
        artifact._store = self
        return artifact


def with_local_copy(store: ArtifactStore, digest: str, use: Callable[[Path], T]) -> T:
    """``use(store.path(digest))``, fetching the copy once more when it is not found: an object store's local
    copy may be evicted by another process between its fetch and its use. :class:`ArtifactEvicted` when it
    vanished each time."""
    for _ in range(FETCHES):
        path = store.path(digest)
        try:
            return use(path)
        except FileNotFoundError:
            continue
    raise ArtifactEvicted(f"artifact {digest}: this host's copy was removed each time as soon as it was fetched "
                          "(is the artifacts cache limit smaller than the files in use?)")
