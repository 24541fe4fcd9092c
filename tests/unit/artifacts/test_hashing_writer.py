"""The writer codecs write into: every byte reaches the file and the digest, large pieces hashed beside the write."""

from __future__ import annotations

import hashlib
import io
import os

import blake3
import pytest

from fluksio.artifacts import LocalArtifactStore
from fluksio.artifacts.hashing import OVERLAP_BYTES, HashingWriter
from fluksio.artifacts.local import publish


@pytest.mark.parametrize("sizes", [[0], [10, 1, 0, 7], [OVERLAP_BYTES, 3], [3 * OVERLAP_BYTES + 5, 11, OVERLAP_BYTES]])
def test_the_digest_and_size_are_those_of_every_byte_written_in_order(sizes):
    pieces = [os.urandom(n) for n in sizes]
    target = io.BytesIO()
    writer = HashingWriter(target)
    for piece in pieces:
        assert writer.write(memoryview(piece)) == len(piece)
    whole = b"".join(pieces)
    assert target.getvalue() == whole
    assert writer.digest == "blake3:" + blake3.blake3(whole).hexdigest()
    assert writer.size == writer.tell() == len(whole)
    sha256 = HashingWriter(io.BytesIO(), algorithm="sha256")
    for piece in pieces:
        sha256.write(piece)
    assert sha256.digest == "sha256:" + hashlib.sha256(whole).hexdigest()


def test_the_folder_store_keeps_a_stream_under_its_digest_once(tmp_path):
    store = LocalArtifactStore(tmp_path)
    data = os.urandom(2 * OVERLAP_BYTES)
    first = store.put_stream(lambda file: file.write(data), name="x.bin")
    again = store.put_stream(lambda file: file.write(data), name="y.bin")
    assert first.digest == again.digest == "blake3:" + blake3.blake3(data).hexdigest()
    assert store.get(first.digest) == data and first.read_bytes() == data
    assert (store.path(first.digest).stat().st_mode & 0o777) == 0o644  # readable by every host and user
    assert [p.name for p in (tmp_path / "blake3").rglob("*") if p.is_file()] == [first.digest.split(":")[1]]
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_file_under_a_digest_is_never_replaced_by_a_second_writer(tmp_path):
    """A reader on another host may have it open or mapped; over NFS a replaced file is gone under it."""
    target, late = tmp_path / "digest", tmp_path / ".tmp-late"
    target.write_bytes(b"first")
    inode = target.stat().st_ino
    late.write_bytes(b"first")
    publish(late, target)
    assert target.stat().st_ino == inode and not late.exists()


def test_without_hard_links_a_finished_file_is_renamed_into_place(tmp_path, monkeypatch):
    def no_links(source, target):
        raise PermissionError(1, "Operation not permitted")  # what a filesystem without hard links answers

    monkeypatch.setattr(os, "link", no_links)
    finished, target = tmp_path / ".tmp-x", tmp_path / "digest"
    finished.write_bytes(b"bytes")
    publish(finished, target)
    assert target.read_bytes() == b"bytes" and not finished.exists()
