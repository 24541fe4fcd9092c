"""Digests of two algorithms side by side: each is validated, stored under its own folder and checked with its
own hasher, so an artifact named by SHA-256 and a codec value named by BLAKE3 share every store."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

import blake3
import pytest

from fluksio.artifacts import Artifact, ArtifactCache, LocalArtifactStore, MemoryArtifactStore
from fluksio.artifacts.checked import check_file, checked_stream, copy_checked
from fluksio.artifacts.digests import (
    digest_of,
    file_digest,
    hasher_for,
    looks_like_digest,
    relative_path,
    validate_digest,
)
from fluksio.errors import ArtifactError

DATA = bytes(range(256)) * 12  # the same in every test process: parameter ids are digests
SHA256 = "sha256:" + hashlib.sha256(DATA).hexdigest()
BLAKE3 = "blake3:" + blake3.blake3(DATA).hexdigest()


def test_each_algorithm_digests_the_bytes_it_names():
    assert digest_of(DATA) == SHA256 and digest_of(DATA, "blake3") == BLAKE3
    assert hasher_for(BLAKE3)[0] == "blake3" and hasher_for(SHA256)[0] == "sha256"


def test_a_file_is_digested_in_pieces_to_the_same_name(tmp_path, monkeypatch):
    monkeypatch.setattr("fluksio.artifacts.digests.READ_BYTES", 1000)  # three pieces
    path = tmp_path / "f"
    path.write_bytes(DATA)
    assert file_digest(path) == SHA256 and file_digest(path, "blake3") == BLAKE3


@pytest.mark.parametrize("digest", [SHA256, BLAKE3], ids=["sha256", "blake3"])
def test_both_forms_are_valid(digest):
    assert validate_digest(digest) == digest and looks_like_digest(digest)


@pytest.mark.parametrize("bad", ["blake3:" + "a" * 63, "blake3:" + "A" * 64, "BLAKE3:" + "a" * 64,
                                 "blake2b:" + "a" * 64, "blake3:../" + "a" * 61])
def test_a_malformed_blake3_digest_is_refused_naming_both_forms(bad):
    with pytest.raises(ArtifactError, match="expected 'sha256:' or 'blake3:' followed by 64 lowercase hex"):
        validate_digest(bad)


def test_what_looks_like_a_digest_is_only_what_starts_with_an_algorithm():
    assert looks_like_digest("blake3:short") and looks_like_digest("sha256:")
    assert not looks_like_digest("md5:" + "a" * 64) and not looks_like_digest("blake3") and not looks_like_digest(3)


def test_each_algorithm_has_its_own_folder_in_a_store(tmp_path):
    assert relative_path(BLAKE3) == f"blake3/{BLAKE3[7:9]}/{BLAKE3[7:]}"
    store = LocalArtifactStore(tmp_path)
    for digest, algorithm in ((SHA256, "sha256"), (BLAKE3, "blake3")):
        file = tmp_path / algorithm / digest[7:9] / digest[7:]
        file.parent.mkdir(parents=True)
        file.write_bytes(DATA)
        assert store.path(digest) == file and store.get(digest) == DATA


@pytest.mark.parametrize("digest", [SHA256, BLAKE3], ids=["sha256", "blake3"])
def test_a_stream_is_checked_with_the_hasher_its_digest_names(digest, tmp_path):
    assert checked_stream(io.BytesIO(DATA), digest, "here").read() == DATA
    target = io.BytesIO()
    assert copy_checked(io.BytesIO(DATA), target, digest, "here") == len(DATA) and target.getvalue() == DATA
    path = tmp_path / "copy"
    path.write_bytes(DATA)
    check_file(path, digest, "here")


@pytest.mark.parametrize("digest", [SHA256, BLAKE3], ids=["sha256", "blake3"])
def test_bytes_that_do_not_match_are_refused_naming_what_they_hash_to(digest, tmp_path):
    other = DATA[:-1] + bytes([DATA[-1] ^ 1])
    algorithm = digest.split(":")[0]
    with pytest.raises(ArtifactError, match=f"does not match its digest \\(its bytes hash to {algorithm}:"):
        checked_stream(io.BytesIO(other), digest, "here").read()
    path = tmp_path / "copy"
    path.write_bytes(other)
    with pytest.raises(ArtifactError, match=f"hash to {digest_of(other, algorithm)}"):
        check_file(path, digest, "here")


def test_the_cache_counts_and_evicts_copies_of_both_algorithms(tmp_path: Path):
    cache = ArtifactCache(tmp_path, limit_bytes=len(DATA) + 100)
    with cache.adding(SHA256) as scratch:
        scratch.write_bytes(DATA)
    os.utime(cache.file(SHA256), (1000, 1000))
    with cache.adding(BLAKE3) as scratch:  # over the limit now
        scratch.write_bytes(DATA)
    assert not cache.file(SHA256).exists() and cache.file(BLAKE3).exists()  # the older went, whatever its kind


def test_the_memory_store_keeps_a_blake3_digest_too():
    stored = MemoryArtifactStore().put(Artifact(BLAKE3, len(DATA), data=DATA))
    assert stored.read_bytes() == DATA
