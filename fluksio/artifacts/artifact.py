"""``Artifact``: bytes that travel between nodes by reference, named by their digest (artifacts/digests.py).

A node returns ``Artifact.from_bytes(...)`` or ``Artifact.from_path(...)``; the
worker stores the bytes once and the message carries only
``{"$artifact": {digest, size, media_type, name}}``. The consumer gets an
``Artifact`` bound to the store, readable with :meth:`read_bytes` or :attr:`path`.
"""

from __future__ import annotations

import mimetypes
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fluksio.artifacts.digests import ARTIFACT_ALGORITHM, digest_of, file_digest, validate_digest
from fluksio.errors import ArtifactError

if TYPE_CHECKING:
    from fluksio.artifacts.store import ArtifactStore

#: Key of the JSON object that stands for an artifact inside a message.
REF_KEY = "$artifact"


class Artifact:
    """A file-like value identified by its content digest."""

    __slots__ = ("digest", "size", "media_type", "name", "_data", "_source", "_store")

    def __init__(
        self,
        digest: str,
        size: int,
        media_type: str = "application/octet-stream",
        name: str | None = None,
        *,
        data: bytes | None = None,
        source: Path | None = None,
        store: ArtifactStore | None = None,
    ) -> None:
        self.digest = validate_digest(digest)
        self.size = size
        self.media_type = media_type
        self.name = name
        self._data = data
        self._source = source
        self._store = store

    @classmethod
    def from_bytes(cls, data: bytes, name: str | None = None, media_type: str | None = None) -> Artifact:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise ArtifactError(f"Artifact.from_bytes needs bytes, got {type(data).__name__}")
        data = bytes(data)
        return cls(digest_of(data), len(data), media_type or _guess_type(name), name, data=data)

    @classmethod
    def from_path(cls, path: str | Path, name: str | None = None, media_type: str | None = None) -> Artifact:
        path = Path(path)
        if not path.is_file():
            raise ArtifactError(f"Artifact.from_path: {path} is not a file")
        name = name or path.name
        return cls(file_digest(path, ARTIFACT_ALGORITHM), path.stat().st_size, media_type or _guess_type(name), name,
                   source=path)

    def read_bytes(self) -> bytes:
        if self._data is not None:
            return self._data
        if self._source is not None:
            return self._source.read_bytes()
        if self._store is None:
            raise ArtifactError(f"artifact {self.digest} is not bound to a store")
        return self._store.get(self.digest)

    @property
    def path(self) -> Path:
        """A local file holding the bytes (the store's copy for a received artifact)."""
        if self._source is not None:
            return self._source
        if self._store is None:
            raise ArtifactError(f"artifact {self.digest} has no file yet; it gets one once a node returns it")
        return self._store.path(self.digest)

    def to_ref(self) -> dict[str, Any]:
        return {REF_KEY: {"digest": self.digest, "size": self.size, "media_type": self.media_type, "name": self.name}}

    @classmethod
    def from_ref(cls, ref: dict[str, Any], store: ArtifactStore | None = None) -> Artifact:
        body = ref[REF_KEY]
        return cls(body["digest"], int(body["size"]), body.get("media_type") or "application/octet-stream",
                   body.get("name"), store=store)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        """Lets ``Artifact`` be a declared flow input type; what an input holds is checked at submit."""
        from pydantic_core import core_schema

        return core_schema.any_schema()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Artifact) and other.digest == self.digest

    def __hash__(self) -> int:
        return hash(self.digest)

    def __repr__(self) -> str:
        return f"Artifact({self.name or self.digest[:19]!r}, {self.size} bytes)"


def is_ref(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and REF_KEY in value


def find_refs(value: Any) -> list[dict[str, Any]]:
    """Every artifact reference inside a JSON value, in order."""
    if is_ref(value):
        return [value]
    if isinstance(value, dict):
        return [r for item in value.values() for r in find_refs(item)]
    if isinstance(value, list):
        return [r for item in value for r in find_refs(item)]
    return []


def _guess_type(name: str | None) -> str:
    guessed = mimetypes.guess_type(name)[0] if name else None
    return guessed or "application/octet-stream"
