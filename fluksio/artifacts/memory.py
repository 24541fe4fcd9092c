"""Artifacts in a dict: for unit tests that want no filesystem."""

from __future__ import annotations

import tempfile
from pathlib import Path

from fluksio.artifacts.artifact import Artifact
from fluksio.artifacts.digests import validate_digest
from fluksio.artifacts.store import ArtifactStore
from fluksio.errors import ArtifactError


class MemoryArtifactStore(ArtifactStore):
    def __init__(self) -> None:
        self._blobs: dict[str, bytes] = {}

    def put(self, artifact: Artifact) -> Artifact:
        self._blobs.setdefault(validate_digest(artifact.digest), artifact.read_bytes())
        return Artifact(artifact.digest, artifact.size, artifact.media_type, artifact.name, store=self)

    def get(self, digest: str) -> bytes:
        try:
            return self._blobs[validate_digest(digest)]
        except KeyError:
            raise ArtifactError(f"artifact {digest} is gone from the memory store") from None

    def exists(self, digest: str) -> bool:
        return validate_digest(digest) in self._blobs

    def path(self, digest: str) -> Path:
        data = self.get(digest)
        handle = tempfile.NamedTemporaryFile(delete=False, prefix="fluksio-artifact-")
        with handle:
            handle.write(data)
        return Path(handle.name)

    def delete(self, digest: str) -> None:
        self._blobs.pop(validate_digest(digest), None)
