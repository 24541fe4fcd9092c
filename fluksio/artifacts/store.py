"""The interface every artifact store implements: content-addressed bytes."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

from fluksio.artifacts.artifact import Artifact


class ArtifactStore(ABC):
    """Bytes kept under their digest. Digests are validated by every implementation before use."""

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

    def bind(self, artifact: Artifact) -> Artifact:
        artifact._store = self
        return artifact
