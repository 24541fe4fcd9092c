"""Content-addressed artifact storage: the :class:`Artifact` value, the store interface, its backends."""

from fluksio.artifacts.artifact import Artifact, digest_of, is_ref, validate_digest
from fluksio.artifacts.local import LocalArtifactStore
from fluksio.artifacts.memory import MemoryArtifactStore
from fluksio.artifacts.store import ArtifactStore

__all__ = ["Artifact", "ArtifactStore", "LocalArtifactStore", "MemoryArtifactStore", "digest_of", "is_ref",
           "validate_digest"]
