"""The object store's own rules, on fsspec's local filesystem (file://): the same code as s3://, no server.

Against a real S3-compatible server: tests/integration/test_object_store.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fluksio.artifacts import Artifact, LocalArtifactStore, ObjectArtifactStore, digest_of, open_store
from fluksio.artifacts.remote import PART_BYTES
from fluksio.errors import ArtifactError, ConfigError
from fluksio.settings import Settings

DATA = b"weights" * 1000
DIGEST = digest_of(DATA)


def object_store(tmp_path: Path, cache: str = "cache", **settings: object) -> ObjectArtifactStore:
    store = open_store(Settings(artifacts_dir=f"file://{tmp_path}/bucket/prefix", artifacts_cache=tmp_path / cache,
                                **settings), check=True)
    assert isinstance(store, ObjectArtifactStore)
    return store


def object_file(tmp_path: Path, digest: str) -> Path:
    algorithm, hexpart = digest.split(":")
    return tmp_path / "bucket" / "prefix" / algorithm / hexpart[:2] / hexpart


def test_a_plain_path_is_the_folder_store_and_a_url_the_object_store(tmp_path: Path) -> None:
    assert isinstance(open_store(Settings(artifacts_dir=tmp_path / "a")), LocalArtifactStore)
    assert isinstance(open_store(Settings(artifacts_dir=str(tmp_path / "a"))), LocalArtifactStore)
    assert isinstance(open_store(Settings(artifacts_dir=f"file://{tmp_path}/b")), ObjectArtifactStore)


def test_keys_are_content_addressed_under_the_prefix(tmp_path: Path) -> None:
    store = object_store(tmp_path)
    store.put(Artifact.from_bytes(DATA))
    assert store.key(DIGEST) == str(object_file(tmp_path, DIGEST))
    assert object_file(tmp_path, DIGEST).read_bytes() == DATA


def test_an_upload_is_skipped_when_the_object_exists(tmp_path: Path) -> None:
    store = object_store(tmp_path)
    store.put(Artifact.from_bytes(DATA, name="first"))
    object_file(tmp_path, DIGEST).write_bytes(b"not overwritten")  # a stand-in that shows whether put wrote
    stored = store.put(Artifact.from_bytes(DATA, name="second"))
    assert stored.name == "second"
    assert object_file(tmp_path, DIGEST).read_bytes() == b"not overwritten"


def test_a_corrupt_object_is_refused_on_every_read_and_never_cached(tmp_path: Path) -> None:
    object_store(tmp_path).put(Artifact.from_bytes(DATA))
    object_file(tmp_path, DIGEST).write_bytes(DATA[:-1] + b"X")
    reader = object_store(tmp_path, cache="fresh-cache")
    for read in (reader.get, reader.path):
        with pytest.raises(ArtifactError, match=f"artifact {DIGEST} read from file://.* does not match its digest"):
            read(DIGEST)
    with reader.open(DIGEST) as stream, pytest.raises(ArtifactError, match="the stored copy is corrupt"):
        stream.read()
    assert [p for p in (tmp_path / "fresh-cache").rglob("*") if p.is_file()] == []


def test_a_node_reads_a_local_copy_from_the_cache(tmp_path: Path) -> None:
    store = object_store(tmp_path)
    store.put(Artifact.from_bytes(DATA))
    local = store.path(DIGEST)
    assert local.is_relative_to(tmp_path / "cache") and local.read_bytes() == DATA
    assert store.path(DIGEST) == local  # fetched once
    with store.open(DIGEST) as handle:
        assert handle.read() == DATA


def test_exists_asks_the_store_not_the_cache(tmp_path: Path) -> None:
    store = object_store(tmp_path)
    store.put(Artifact.from_bytes(DATA))
    store.path(DIGEST)
    object_file(tmp_path, DIGEST).unlink()
    assert store.exists(DIGEST) is False  # what the run cache and submit ask: the object is gone


def test_a_large_file_is_streamed_in_parts_and_read_back(tmp_path: Path) -> None:
    source = tmp_path / "checkpoint.bin"
    data = os.urandom(2 * PART_BYTES + 123)
    source.write_bytes(data)
    stored = object_store(tmp_path).put(Artifact.from_path(source))
    assert stored.digest == digest_of(data)
    reader = object_store(tmp_path, cache="other-host")
    assert reader.path(stored.digest).read_bytes() == data


@pytest.mark.parametrize("size", [100, 2 * PART_BYTES + 7])
def test_a_file_changed_after_from_path_is_refused_and_nothing_is_stored(tmp_path: Path, size: int) -> None:
    source = tmp_path / "checkpoint.bin"
    source.write_bytes(b"a" * size)
    artifact = Artifact.from_path(source)
    source.write_bytes(b"b" * size)
    store = object_store(tmp_path)
    with pytest.raises(ArtifactError, match=r"the file changed after it was digested \(by Artifact.from_path"):
        store.put(artifact)
    assert store.exists(artifact.digest) is False
    assert [p for p in (tmp_path / "bucket").rglob("*") if p.is_file()] == []


def test_delete_removes_the_object_and_the_local_copy(tmp_path: Path) -> None:
    store = object_store(tmp_path)
    store.put(Artifact.from_bytes(DATA))
    local = store.path(DIGEST)
    store.delete(DIGEST)
    assert not local.exists() and store.exists(DIGEST) is False
    with pytest.raises(ArtifactError, match=f"artifact {DIGEST} is gone from file://"):
        store.get(DIGEST)


def test_an_unknown_protocol_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nosuch:// is no storage protocol fsspec knows"):
        open_store(Settings(artifacts_dir="nosuch://bucket/x"))


def test_a_protocol_whose_package_is_missing_says_which_to_install(tmp_path: Path) -> None:
    pytest.importorskip("fsspec")
    try:
        import gcsfs  # noqa: F401
        pytest.skip("gcsfs is installed here")
    except ImportError:
        pass
    with pytest.raises(ConfigError, match=r"FLUKSIO_ARTIFACTS_DIR=gs://bucket/x needs the fsspec package for gs://"):
        open_store(Settings(artifacts_dir="gs://bucket/x"))


def test_a_missing_s3_transport_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import fsspec

    def missing(protocol: str) -> None:
        raise ImportError("Install s3fs to access S3")

    monkeypatch.setattr(fsspec, "get_filesystem_class", missing)
    with pytest.raises(ConfigError, match=r"needs 'fluksio\[s3\]' installed"):
        open_store(Settings(artifacts_dir="s3://bucket/x"))


def test_a_large_value_is_uploaded_in_parts_under_its_blake3_digest_and_read_back(tmp_path: Path) -> None:
    data = os.urandom(2 * PART_BYTES + 123)
    stored = object_store(tmp_path).put_stream(lambda file: file.write(data), name="value.bin")
    assert stored.digest.startswith("blake3:") and object_file(tmp_path, stored.digest).read_bytes() == data
    assert object_store(tmp_path, cache="other-host").path(stored.digest).read_bytes() == data


def test_a_copy_evicted_between_lookup_and_open_is_read_from_the_bucket(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    store = object_store(tmp_path)
    store.put(Artifact.from_bytes(DATA))
    evicted = store.path(DIGEST)
    evicted.unlink()  # by another process, right after this one's lookup found it
    monkeypatch.setattr(store.cache, "lookup", lambda digest: evicted)
    with store.open(DIGEST) as handle:
        assert handle.read() == DATA
