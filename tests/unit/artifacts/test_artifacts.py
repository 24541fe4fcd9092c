"""Content-addressed artifacts: digests, and the stores (folder, memory, object store over file://)."""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading

import pytest

from fluksio.artifacts import (
    Artifact,
    ArtifactStore,
    LocalArtifactStore,
    MemoryArtifactStore,
    digest_of,
    is_ref,
    open_store,
    validate_digest,
)
from fluksio.errors import ArtifactError
from fluksio.settings import Settings

DATA = b"model weights \x00\x01\x02"
DIGEST = "sha256:" + hashlib.sha256(DATA).hexdigest()


# -- Artifact ----------------------------------------------------------------------------------------


def test_from_bytes_names_the_content_by_its_sha256():
    artifact = Artifact.from_bytes(DATA, name="model.bin")
    assert artifact.digest == DIGEST == digest_of(DATA)
    assert artifact.size == len(DATA)
    assert artifact.name == "model.bin"
    assert artifact.read_bytes() == DATA


def test_from_bytes_accepts_bytearray_and_memoryview():
    assert Artifact.from_bytes(bytearray(DATA)).digest == DIGEST
    assert Artifact.from_bytes(memoryview(DATA)).digest == DIGEST


def test_from_bytes_rejects_text():
    with pytest.raises(ArtifactError, match="needs bytes, got str"):
        Artifact.from_bytes("not bytes")


def test_media_type_is_guessed_from_the_name_or_given():
    assert Artifact.from_bytes(b"{}", name="data.json").media_type == "application/json"
    assert Artifact.from_bytes(b"x").media_type == "application/octet-stream"
    assert Artifact.from_bytes(b"x", name="x.json", media_type="text/plain").media_type == "text/plain"


def test_from_path_digests_the_file(tmp_path):
    file = tmp_path / "weights.bin"
    file.write_bytes(DATA)
    artifact = Artifact.from_path(file)
    assert artifact.digest == DIGEST
    assert artifact.size == len(DATA)
    assert artifact.name == "weights.bin"
    assert artifact.path == file
    assert artifact.read_bytes() == DATA


def test_from_path_of_a_large_file_matches_from_bytes(tmp_path):
    data = os.urandom(3 * (1 << 20) + 17)  # several read chunks
    file = tmp_path / "big.bin"
    file.write_bytes(data)
    assert Artifact.from_path(file).digest == Artifact.from_bytes(data).digest


def test_from_path_of_a_missing_file_or_a_folder_is_an_error(tmp_path):
    with pytest.raises(ArtifactError, match="is not a file"):
        Artifact.from_path(tmp_path / "absent.bin")
    with pytest.raises(ArtifactError, match="is not a file"):
        Artifact.from_path(tmp_path)


def test_equal_content_is_an_equal_artifact():
    a = Artifact.from_bytes(DATA, name="a")
    b = Artifact.from_bytes(DATA, name="b")
    assert a == b and hash(a) == hash(b)
    assert a != Artifact.from_bytes(b"other")


def test_a_ref_round_trips():
    artifact = Artifact.from_bytes(DATA, name="m.bin")
    ref = artifact.to_ref()
    assert is_ref(ref)
    assert ref == {"$artifact": {"digest": DIGEST, "size": len(DATA), "media_type": "application/octet-stream",
                                 "name": "m.bin"}}
    back = Artifact.from_ref(ref)
    assert (back.digest, back.size, back.name) == (DIGEST, len(DATA), "m.bin")


@pytest.mark.parametrize("value", [{"$artifact": {}, "extra": 1}, {"digest": DIGEST}, [DIGEST], DIGEST, None])
def test_is_ref_only_for_a_lone_artifact_key(value):
    assert is_ref(value) is False


def test_an_unbound_received_artifact_cannot_be_read():
    artifact = Artifact.from_ref(Artifact.from_bytes(DATA).to_ref())
    with pytest.raises(ArtifactError, match="not bound to a store"):
        artifact.read_bytes()
    with pytest.raises(ArtifactError, match="has no file yet"):
        artifact.path  # noqa: B018


# -- digest validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "digest",
    [
        "sha256:../../etc/passwd",
        "sha256:" + "../" * 21 + "a",  # 64 characters, but not hex
        "sha256:" + "a" * 63,
        "sha256:" + "a" * 65,
        "sha256:" + "A" * 64,
        "SHA256:" + "a" * 64,
        "md5:" + "a" * 64,
        "a" * 64,
        "sha256:" + "a" * 62 + "/x",
        "sha256:" + "g" * 64,
        "",
        None,
        42,
    ],
)
def test_malformed_digests_are_rejected(digest):
    with pytest.raises(ArtifactError, match="is not an artifact digest"):
        validate_digest(digest)


def test_a_digest_with_a_trailing_newline_is_rejected():
    with pytest.raises(ArtifactError):
        validate_digest("sha256:" + "a" * 64 + "\n")


def test_a_well_formed_digest_is_returned():
    assert validate_digest(DIGEST) == DIGEST


def test_an_artifact_cannot_be_built_with_a_bad_digest():
    with pytest.raises(ArtifactError):
        Artifact("sha256:../../etc/passwd", 1)


# -- stores ------------------------------------------------------------------------------------------


@pytest.fixture(params=["local", "memory", "object"])
def store(request, tmp_path, monkeypatch) -> ArtifactStore:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the memory store's path() files land here
    if request.param == "object":  # the object store's code, on fsspec's local filesystem
        return open_store(Settings(artifacts_dir=f"file://{tmp_path}/bucket/prefix",
                                   artifacts_cache=tmp_path / "cache"), check=True)
    return LocalArtifactStore(tmp_path / "artifacts") if request.param == "local" else MemoryArtifactStore()


def test_put_then_get_exists_and_path(store):
    stored = store.put(Artifact.from_bytes(DATA, name="m.bin"))
    assert stored.digest == DIGEST and stored.name == "m.bin" and stored.size == len(DATA)
    assert store.exists(DIGEST)
    assert store.get(DIGEST) == DATA
    assert store.path(DIGEST).read_bytes() == DATA
    assert stored.read_bytes() == DATA  # bound to the store


def test_a_received_ref_reads_through_the_store(store):
    store.put(Artifact.from_bytes(DATA))
    received = Artifact.from_ref(Artifact.from_bytes(DATA).to_ref(), store)
    assert received.read_bytes() == DATA
    assert received.path.read_bytes() == DATA


def test_bind_attaches_an_artifact_to_the_store(store):
    store.put(Artifact.from_bytes(DATA))
    artifact = store.bind(Artifact.from_ref(Artifact.from_bytes(DATA).to_ref()))
    assert artifact.read_bytes() == DATA


def test_missing_digests_are_reported(store):
    other = digest_of(b"never stored")
    assert store.exists(other) is False
    with pytest.raises(ArtifactError, match="is gone"):
        store.get(other)
    with pytest.raises(ArtifactError, match="is gone"):
        store.path(other)
    with pytest.raises(ArtifactError, match="is gone"):
        store.open(other)


def test_open_streams_the_bytes(store):
    data = os.urandom(3 * (1 << 20) + 5)
    stored = store.put(Artifact.from_bytes(data))
    pieces = []
    with store.open(stored.digest) as handle:
        for piece in iter(lambda: handle.read(65_536), b""):
            pieces.append(piece)
    assert b"".join(pieces) == data and len(pieces) > 1


@pytest.mark.parametrize("bad", ["sha256:../../etc/passwd", "sha256:" + "A" * 64, "sha256:abc"])
def test_stores_validate_digests_before_touching_anything(store, bad, tmp_path):
    for operation in (store.get, store.exists, store.path, store.open):
        with pytest.raises(ArtifactError, match="is not an artifact digest"):
            operation(bad)


def test_put_twice_keeps_one_copy(store):
    store.put(Artifact.from_bytes(DATA, name="first"))
    stored = store.put(Artifact.from_bytes(DATA, name="second"))
    assert stored.name == "second"
    assert store.get(DIGEST) == DATA


def test_local_store_lays_files_out_by_digest(tmp_path):
    store = LocalArtifactStore(tmp_path)
    store.put(Artifact.from_bytes(DATA))
    hexpart = DIGEST.split(":")[1]
    expected = tmp_path / "sha256" / hexpart[:2] / hexpart
    assert store.path(DIGEST) == expected
    assert expected.read_bytes() == DATA


def test_local_store_put_from_a_file_copies_it(tmp_path):
    source = tmp_path / "src.bin"
    source.write_bytes(DATA)
    store = LocalArtifactStore(tmp_path / "store")
    stored = store.put(Artifact.from_path(source))
    source.unlink()
    assert stored.read_bytes() == DATA
    assert stored.path != source


def test_local_store_leaves_no_temporary_files(tmp_path):
    store = LocalArtifactStore(tmp_path)
    for i in range(3):
        store.put(Artifact.from_bytes(DATA + bytes([i])))
    leftovers = [p for p in tmp_path.rglob("*") if p.name.startswith(".tmp-")]
    assert leftovers == []


def test_local_store_put_is_atomic_when_writing_fails(tmp_path):
    class Exploding(Artifact):
        __slots__ = ()

        def read_bytes(self) -> bytes:
            raise OSError("disk on fire")

    store = LocalArtifactStore(tmp_path)
    artifact = Exploding(DIGEST, len(DATA), data=DATA)
    with pytest.raises(OSError, match="disk on fire"):
        store.put(artifact)
    assert store.exists(DIGEST) is False
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []  # no half file, no temporary file


def test_local_store_concurrent_puts_of_one_digest_end_whole(tmp_path):
    data = os.urandom(1 << 20)
    store = LocalArtifactStore(tmp_path)
    errors = []

    def put():
        try:
            store.put(Artifact.from_bytes(data))
        except Exception as exc:  # pragma: no cover - only on failure
            errors.append(exc)

    threads = [threading.Thread(target=put) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert store.get(digest_of(data)) == data
    assert [p for p in tmp_path.rglob("*") if p.name.startswith(".tmp-")] == []


def test_memory_store_delete_forgets_the_bytes():
    store = MemoryArtifactStore()
    store.put(Artifact.from_bytes(DATA))
    store.delete(DIGEST)
    store.delete(DIGEST)  # deleting twice is harmless
    assert store.exists(DIGEST) is False


def test_memory_store_path_is_a_readable_file(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    store = MemoryArtifactStore()
    store.put(Artifact.from_bytes(DATA))
    path = store.path(DIGEST)
    assert path.parent == tmp_path
    assert path.read_bytes() == DATA
