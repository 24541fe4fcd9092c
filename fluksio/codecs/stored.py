"""A codec's value as an artifact: stored under its digest, referenced with the codec's name, read back.

The reference is an artifact reference with one more field,
``{"$artifact": {digest, size, media_type, name, codec}}``: any machine that has the
codec (and the artifact store) makes the same type from it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fluksio.artifacts.artifact import REF_KEY, Artifact
from fluksio.artifacts.store import ArtifactEvicted, ArtifactStore, with_local_copy
from fluksio.codecs.registry import REGISTRY, Codec, CodecRegistry
from fluksio.errors import ArtifactError, CodecError


def codec_ref(artifact: Artifact, codec: str) -> dict[str, Any]:
    """The reference of an artifact that holds a value ``codec`` encoded."""
    ref = artifact.to_ref()
    ref[REF_KEY]["codec"] = codec
    return ref


def codec_of(ref: dict[str, Any]) -> str | None:
    """The codec a reference names (``None``: a plain :class:`Artifact`)."""
    codec = ref[REF_KEY].get("codec") if isinstance(ref.get(REF_KEY), dict) else None
    return codec if isinstance(codec, str) else None


def store_value(value: Any, codec: Codec, store: ArtifactStore, name: str) -> tuple[Artifact, dict[str, Any]]:
    """Encode ``value`` once, straight into the store; the stored artifact (its file called ``name`` + the
    codec's suffix) and its reference.

    :class:`CodecError` when the codec refuses the value, its message starting with "is a …" so that the
    caller can put the value's name before it.
    """

    def write(file: Any) -> None:
        codec.write(value, file)

    try:
        artifact = store.put_stream(write, name=f"{name}{codec.suffix}", media_type=codec.media_type)
    except (CodecError, ArtifactError):
        raise
    except Exception as exc:  # a user's codec may raise anything: it is that codec's failure, said as such
        raise CodecError(f"is a {type(value).__module__}.{type(value).__qualname__} that codec {codec.name!r} could "
                         f"not encode: {type(exc).__name__}: {exc}") from exc
    return artifact, codec_ref(artifact, codec.name)


def load_value(ref: dict[str, Any], store: ArtifactStore, registry: CodecRegistry = REGISTRY) -> Any:
    """The value a codec reference stands for, read from the store's file of its digest."""
    name = codec_of(ref)
    if name is None:
        raise CodecError(f"{ref!r:.200} names no codec")
    codec = registry.named(name)
    digest = ref[REF_KEY]["digest"]

    def read(path: Path) -> Any:
        try:
            return codec.read(path)
        except (CodecError, FileNotFoundError):
            raise  # a missing file: fetched once more (with_local_copy)
        except Exception as exc:
            raise CodecError(f"codec {name!r} could not read artifact {digest} (a {codec.type_name}): "
                             f"{type(exc).__name__}: {exc}") from exc

    try:
        return with_local_copy(store, digest, read)
    except ArtifactEvicted as exc:
        raise CodecError(str(exc)) from None
