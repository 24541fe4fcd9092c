"""A size-limited folder of local copies of remote artifacts, least recently used evicted first.

Layout ``<root>/<algorithm>/ab/abcdef…`` like the folder store; files arrive through a temporary file and a
rename, so a reader never sees half a copy, and several processes may share one cache. A copy's
modification time is its last use (set on every hit: access times are often not kept), and eviction
removes the oldest until the folder fits its limit again. The copy just added is never evicted, so an
artifact larger than the whole limit is still there for the node that asked for it.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import chain
from pathlib import Path

from fluksio.artifacts.digests import ALGORITHMS, relative_path

log = logging.getLogger(__name__)

#: A temporary file older than this was left by a process that died mid-download, in seconds.
STALE_TEMPORARY_S = 24 * 3600


class ArtifactCache:
    def __init__(self, root: str | Path, limit_bytes: int) -> None:
        self.root = Path(root)
        #: The most the copies may take together, in bytes.
        self.limit_bytes = limit_bytes

    def file(self, digest: str) -> Path:
        return self.root / relative_path(digest)

    def lookup(self, digest: str) -> Path | None:
        """The local copy, marked as just used; ``None`` when there is none."""
        file = self.file(digest)
        try:
            os.utime(file)
        except FileNotFoundError:
            return None
        except PermissionError:  # another user's copy in a shared cache: usable, its use just not noted
            return file if file.is_file() else None
        return file

    @contextmanager
    def adding(self, digest: str) -> Iterator[Path]:
        """A temporary file to write the copy to; it becomes the cached copy when the block ends without an
        error (else it is removed). The caller checks the bytes against the digest first: a cached copy is
        trusted from then on."""
        target = self.file(digest)
        scratch = self.root / "tmp"
        scratch.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=scratch, prefix=".tmp-")
        os.close(fd)
        try:
            yield Path(tmp)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.evict(keep=target)

    def evict(self, keep: Path | None = None) -> int:
        """Remove least recently used copies until the rest fit the limit; returns the bytes freed."""
        copies = []
        total = 0
        for file in chain.from_iterable(self.root.glob(f"{algorithm}/*/*") for algorithm in ALGORITHMS):
            try:
                stat = file.stat()
            except FileNotFoundError:  # another process evicted it meanwhile
                continue
            copies.append((stat.st_mtime, stat.st_size, file))
            total += stat.st_size
        freed = 0
        for _used, size, file in sorted(copies):
            if total - freed <= self.limit_bytes:
                break
            if file == keep:
                continue
            # A reader that opened the file before keeps reading it: unlinking frees the space only then.
            file.unlink(missing_ok=True)
            freed += size
        self._remove_stale_temporaries()
        if freed:
            log.info("artifacts cache %s: evicted %d MB to stay under %d MB", self.root, freed >> 20,
                     self.limit_bytes >> 20)
        return freed

    def _remove_stale_temporaries(self) -> None:
        cutoff = time.time() - STALE_TEMPORARY_S
        for file in (self.root / "tmp").glob(".tmp-*"):
            try:
                if file.stat().st_mtime < cutoff:
                    file.unlink()
            except FileNotFoundError:
                continue
