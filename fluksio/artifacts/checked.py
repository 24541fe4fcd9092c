"""Bytes checked against their digest as they stream: a remote copy is never used unless it matches.

The check costs one pass of the digest's hasher over bytes that are read anyway, so it is made on every read of a
remote object; a local cache file is checked once, as it is written.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import BinaryIO

from fluksio.artifacts.digests import file_digest, hasher_for
from fluksio.errors import ArtifactError

#: Bytes read from a store per request and copied per step: large enough that a stream of many
#: gigabytes is a few hundred requests, small enough that memory stays flat.
CHUNK_BYTES = 8 << 20


#: What to do about a stored copy that does not match its digest.
CORRUPT = ("the stored copy is corrupt and was refused; make the artifact again, or delete the object so that "
           "the run cache stops offering it")
#: What happened when a file being stored does not match the digest it was given.
CHANGED = ("the file changed after it was digested (by Artifact.from_path, or as a value was written); nothing "
           "was stored")


def mismatch(digest: str, got: str, where: str, advice: str = CORRUPT) -> ArtifactError:
    return ArtifactError(f"artifact {digest} read from {where} does not match its digest (its bytes hash to "
                         f"{got}): {advice}")


class CheckedReader(io.RawIOBase):
    """Reads ``source`` through, hashing; at its end raises :class:`ArtifactError` unless the bytes match.

    Any other failure of ``source`` (a timeout, a lost connection) is an :class:`ArtifactError` too, naming
    the digest and ``where`` (the store's URL, without secrets).
    """

    def __init__(self, source: BinaryIO, digest: str, where: str, advice: str = CORRUPT) -> None:
        super().__init__()
        self._source = source
        self._digest = digest
        self._where = where
        self._advice = advice
        self._algorithm, self._hasher = hasher_for(digest)
        self._done = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self._done:
            return 0
        try:
            data = self._source.read(len(buffer))
        except ArtifactError:
            raise
        except Exception as exc:
            raise ArtifactError(f"artifact {self._digest}: reading it from {self._where} failed: "
                                f"{type(exc).__name__}: {exc}") from exc
        if not data:
            self._done = True
            got = f"{self._algorithm}:{self._hasher.hexdigest()}"
            if got != self._digest:
                raise mismatch(self._digest, got, self._where, self._advice)
            return 0
        self._hasher.update(data)
        buffer[:len(data)] = data
        return len(data)

    def close(self) -> None:
        try:
            self._source.close()
        finally:
            super().close()


def checked_stream(source: BinaryIO, digest: str, where: str) -> BinaryIO:
    """``source`` as a buffered binary file whose bytes are checked against ``digest`` (see CheckedReader)."""
    return io.BufferedReader(CheckedReader(source, digest, where), CHUNK_BYTES)  # type: ignore[return-value]


def copy_checked(source: BinaryIO, target: BinaryIO, digest: str, where: str, advice: str = CORRUPT) -> int:
    """Copy all of ``source`` to ``target`` in chunks, checking the digest; returns the bytes copied."""
    copied = 0
    reader = CheckedReader(source, digest, where, advice)
    buffer = bytearray(CHUNK_BYTES)
    view = memoryview(buffer)
    while True:
        count = reader.readinto(view)
        if not count:
            return copied
        target.write(view[:count])
        copied += count


def check_file(path: Path, digest: str, where: str) -> None:
    """Raise :class:`ArtifactError` unless the file at ``path`` (a copy fetched from ``where``) matches."""
    got = file_digest(path, hasher_for(digest)[0])
    if got != digest:
        raise mismatch(digest, got, where)
