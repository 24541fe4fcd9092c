"""The local cache of remote artifacts: a size limit, least recently used copies evicted first."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fluksio.artifacts import ArtifactCache, digest_of


def add(cache: ArtifactCache, data: bytes, used_at: float | None = None) -> Path:
    digest = digest_of(data)
    with cache.adding(digest) as scratch:
        scratch.write_bytes(data)
    file = cache.file(digest)
    if used_at is not None:
        os.utime(file, (used_at, used_at))
    return file


def test_a_copy_is_found_after_it_was_added(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path, limit_bytes=1 << 20)
    assert cache.lookup(digest_of(b"x")) is None
    file = add(cache, b"x")
    assert cache.lookup(digest_of(b"x")) == file and file.read_bytes() == b"x"


def test_the_least_recently_used_copies_go_first_when_the_limit_is_passed(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path, limit_bytes=250)
    oldest = add(cache, b"a" * 100, used_at=1000)
    middle = add(cache, b"b" * 100, used_at=2000)
    cache.lookup(digest_of(b"a" * 100))  # used just now: the most recent
    newest = add(cache, b"c" * 100)
    assert oldest.exists() and newest.exists()
    assert not middle.exists()
    assert sum(p.stat().st_size for p in tmp_path.glob("sha256/*/*")) <= 250


def test_a_copy_larger_than_the_whole_limit_is_kept_for_its_reader(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path, limit_bytes=10)
    other = add(cache, b"small", used_at=1000)
    big = add(cache, b"z" * 100)
    assert big.exists() and not other.exists()


def test_a_failed_download_leaves_nothing(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path, limit_bytes=1 << 20)
    digest = digest_of(b"never")
    with pytest.raises(OSError), cache.adding(digest) as scratch:
        scratch.write_bytes(b"half")
        raise OSError("connection lost")
    assert cache.lookup(digest) is None
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_stale_temporary_files_are_removed(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path, limit_bytes=1 << 20)
    (tmp_path / "tmp").mkdir()
    stale, fresh = tmp_path / "tmp" / ".tmp-dead", tmp_path / "tmp" / ".tmp-busy"
    stale.write_bytes(b"x")
    fresh.write_bytes(b"y")
    os.utime(stale, (1000, 1000))
    cache.evict()
    assert not stale.exists() and fresh.exists()
