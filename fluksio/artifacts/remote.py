"""Artifacts in an object store (``s3://bucket/prefix`` or any fsspec URL): ``<prefix>/<algorithm>/ab/abcdef…``.

The transport is fsspec (s3fs for S3: ``pip install 'fluksio[s3]'``), so the same code serves gs://,
az:// and file:// once their fsspec package is installed. Keys are content addressed, so an upload is
skipped when the object exists, and no object is ever rewritten. Large artifacts stream both ways: a
file is uploaded in parts (multipart on S3) from a fixed-size buffer, and read back into a local cache
folder (see cache.py) in chunks, hashed as they come: a copy that does not match its digest is refused.
"""

from __future__ import annotations

import io
import math
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from fluksio.artifacts.artifact import Artifact
from fluksio.artifacts.cache import ArtifactCache
from fluksio.artifacts.checked import CHANGED, CHUNK_BYTES, check_file, checked_stream, copy_checked, mismatch
from fluksio.artifacts.digests import digest_of, relative_path
from fluksio.artifacts.store import ArtifactStore
from fluksio.errors import ArtifactError

#: Part size of an upload, in bytes. The upload buffer holds about one part (S3 wants 5 MiB at least),
#: so this bounds the memory an upload takes whatever the file's size.
PART_BYTES = 8 << 20
#: S3 takes at most 10,000 parts per object; parts grow beyond PART_BYTES for files past ~80 GB.
MAX_PARTS = 9_000


class ObjectArtifactStore(ArtifactStore):
    """``url``: where the store lives (its ``sha256/`` and ``blake3/`` keys go below it); ``cache``: where
    local copies go; ``options``: fsspec storage options (endpoint, timeouts). ``where``: the URL as
    messages name it."""

    def __init__(self, url: str, cache: ArtifactCache, options: dict[str, Any] | None = None,
                 where: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.cache = cache
        self.where = where or self.url
        self._options = dict(options or {})
        self._fs: Any = None
        self._root = ""
        self._pid = 0
        self._lock = threading.Lock()

    def filesystem(self) -> tuple[Any, str]:
        """The fsspec filesystem and the root path inside it (``bucket/prefix``), made once per process."""
        with self._lock:
            # fsspec's async filesystems (s3fs) refuse to be used in a forked child, and Celery's prefork
            # pool forks the worker: each process makes its own.
            if self._fs is None or self._pid != os.getpid():
                from fsspec.core import url_to_fs  # type: ignore[import-untyped]

                self._fs, self._root = url_to_fs(self.url, **self._options)
                self._pid = os.getpid()
                if hasattr(self._fs, "retries"):
                    # botocore already retries (config retries); s3fs retrying each of those again would
                    # multiply how long a dead store holds a node call before it fails.
                    self._fs.retries = 1
        return self._fs, self._root.rstrip("/")

    def key(self, digest: str) -> str:
        return f"{self.filesystem()[1]}/{relative_path(digest)}"

    @contextmanager
    def _failures(self, doing: str, digest: str, reading: bool = True) -> Iterator[None]:
        """Every failure of the store as an :class:`ArtifactError` naming the digest and the store.

        ``reading``: a missing object means the artifact is gone (else it is one more failure).
        """
        try:
            yield
        except ArtifactError:
            raise
        except FileNotFoundError:
            if not reading:
                raise ArtifactError(f"artifact store {self.where}: could not {doing} artifact {digest}: "
                                    "the store answered 'not found' (is the bucket gone?)") from None
            raise ArtifactError(f"artifact {digest} is gone from {self.where}") from None
        except Exception as exc:
            raise ArtifactError(f"artifact store {self.where}: could not {doing} artifact {digest}: "
                                f"{type(exc).__name__}: {exc}") from exc

    def put(self, artifact: Artifact) -> Artifact:
        key = self.key(artifact.digest)
        with self._failures("store", artifact.digest, reading=False):
            fs = self.filesystem()[0]
            if not fs.exists(key):
                self._upload(fs, key, artifact)
        return Artifact(artifact.digest, artifact.size, artifact.media_type, artifact.name, store=self)

    def _upload(self, fs: Any, key: str, artifact: Artifact) -> None:
        if artifact.size <= PART_BYTES:
            data = artifact.read_bytes()
            _check_made(artifact, data)
            fs.pipe_file(key, data)  # one request; S3 shows an object whole or not at all
            return
        part = max(PART_BYTES, math.ceil(artifact.size / MAX_PARTS))
        # Not committed until every part is up and the bytes matched: an object under a digest's key is
        # always whole, never the half an interrupted upload left.
        target = fs.open(key, "wb", block_size=part, autocommit=False)
        try:
            with _source(artifact) as source:
                copy_checked(source, target, artifact.digest, f"the file of {artifact!r}", CHANGED)
            target.close()  # sends the last part
        except BaseException:
            target.discard()
            raise
        try:
            target.commit()
        except Exception:
            # A completion that timed out may have completed all the same (its retry then finds no upload
            # to complete): the object is there, whole, and the upload succeeded.
            if not _landed(fs, key, artifact.size):
                target.discard()
                raise

    def get(self, digest: str) -> bytes:
        return self.path(digest).read_bytes()

    def exists(self, digest: str) -> bool:
        key = self.key(digest)
        with self._failures("look for", digest):
            return bool(self.filesystem()[0].exists(key))

    def path(self, digest: str) -> Path:
        """The cached local copy, fetched (and checked) first if this host has none."""
        hit = self.cache.lookup(digest)
        if hit is not None:
            return hit
        key = self.key(digest)
        with self._failures("fetch", digest), self.cache.adding(digest) as scratch:
            # One streamed GET (not ranged reads), checked before the copy gets its name in the cache.
            self.filesystem()[0].get_file(key, str(scratch))
            check_file(scratch, digest, self.where)
        return self.cache.file(digest)

    def open(self, digest: str) -> BinaryIO:
        hit = self.cache.lookup(digest)
        if hit is not None:
            try:
                return hit.open("rb")
            except FileNotFoundError:
                pass  # evicted by another process since the lookup: the bucket's copy is read instead
        key = self.key(digest)
        with self._failures("read", digest):
            return checked_stream(self._open_remote(key), digest, self.where)

    def _open_remote(self, key: str) -> BinaryIO:
        # No read-ahead cache: reads come in CHUNK_BYTES pieces, each one ranged request.
        return self.filesystem()[0].open(key, "rb", block_size=CHUNK_BYTES, cache_type="none")  # type: ignore[no-any-return]

    def delete(self, digest: str) -> None:
        """Remove the object (and this host's copy): for tests and for tidying a bucket by hand."""
        key = self.key(digest)
        with self._failures("delete", digest):
            fs = self.filesystem()[0]
            if fs.exists(key):
                fs.rm_file(key)
        self.cache.file(digest).unlink(missing_ok=True)

    def check(self) -> None:
        from fluksio.artifacts.reachable import check_reachable

        fs, root = self.filesystem()
        check_reachable(fs, root, self.where)


@contextmanager
def _source(artifact: Artifact) -> Iterator[BinaryIO]:
    if artifact._source is not None:
        with artifact._source.open("rb") as handle:
            yield handle
    else:
        yield io.BytesIO(artifact.read_bytes())


def _landed(fs: Any, key: str, size: int) -> bool:
    try:
        return bool(fs.info(key)["size"] == size)
    except Exception:
        return False


def _check_made(artifact: Artifact, data: bytes) -> None:
    got = digest_of(data, artifact.digest.split(":", 1)[0])
    if got != artifact.digest:
        raise mismatch(artifact.digest, got, f"the file of {artifact!r}", CHANGED)
