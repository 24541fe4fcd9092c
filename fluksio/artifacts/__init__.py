"""Content-addressed artifact storage: the :class:`Artifact` value, the store interface, its backends."""

from fluksio.artifacts.artifact import Artifact, is_ref
from fluksio.artifacts.cache import ArtifactCache
from fluksio.artifacts.digests import digest_of, validate_digest
from fluksio.artifacts.factory import open_store
from fluksio.artifacts.local import LocalArtifactStore
from fluksio.artifacts.memory import MemoryArtifactStore
from fluksio.artifacts.remote import ObjectArtifactStore
from fluksio.artifacts.store import ArtifactStore

__all__ = ["Artifact", "ArtifactCache", "ArtifactStore", "LocalArtifactStore", "MemoryArtifactStore",
           "ObjectArtifactStore", "digest_of", "is_ref", "open_store", "validate_digest"]
