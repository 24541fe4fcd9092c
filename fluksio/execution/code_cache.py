"""A worker's unpacked code packages: fetched from the artifact store once, kept on disk, least recently used
evicted first (``FLUKSIO_CODE_CACHE_MB``).

Layout: ``<folder>/sha256-<hex>/files/…`` holds one package's files (what a package call puts first on
``sys.path``), and ``<folder>/sha256-<hex>/used`` is its mark: its modification time is the package's last
use, its text the bytes its files take. A package is unpacked into a temporary folder beside the others and
renamed into place in one step, so a reader never sees half a package, and two processes of one worker that
fetch the same package at once both end up using one folder (the loser removes its own).

The bytes are checked against the digest here, before a single file is written: the artifact store is
reachable by others, and a package is code this worker is about to import.

A process remembers the packages it checked out, and marks one it keeps using at most once every
:data:`MARK_EVERY_S`: a later call of a package costs no file system call, and a package in use is never old
enough to be evicted (:data:`IN_USE_S` is ten times longer).
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from fluksio.artifacts.store import ArtifactStore
from fluksio.errors import ArtifactError
from fluksio.flows.package import PackageError, unpack
from fluksio.settings import Settings

log = logging.getLogger(__name__)

#: A package used more recently than this, in seconds, is never evicted: a call may be importing from it, or
#: reading one of its data files, right now.
IN_USE_S = 600.0
#: A temporary folder older than this was left by a process that died while unpacking, in seconds.
STALE_TEMPORARY_S = 3600.0
#: Where a package's files are, inside its folder.
FILES = "files"
#: Its last-use mark, inside its folder.
USED = "used"
#: Descriptors of the packages this process holds (:func:`hold`).
_holding: list[int] = []
#: The only digests a package is named by (flows/package.py names each by the sha256 of its archive).
ALGORITHM = "sha256"
#: How often a process marks a package it keeps checking out as used, at most, in seconds.
MARK_EVERY_S = 60.0

#: In this process: package folder → when this process last found it there and marked it (monotonic seconds).
_marked: dict[Path, float] = {}


@dataclass(frozen=True)
class _Held:
    """One package in the cache, as eviction sees it."""

    folder: Path
    used: float
    size: int


class CodeCache:
    """Unpacked code packages under ``folder``, taking at most ``max_bytes`` beyond the package in use."""

    def __init__(self, folder: Path, max_bytes: int) -> None:
        self.folder = Path(folder).resolve()  # a package folder goes on sys.path: never relative to a cwd
        self.max_bytes = max_bytes

    @classmethod
    def of(cls, settings: Settings) -> CodeCache:
        """The cache of a worker with ``settings``: ``code`` beside its artifacts cache (``.fluksio/code``)."""
        return cls(settings.artifacts_cache.parent / "code", int(settings.code_cache_mb * 1_000_000))

    def checkout(self, artifacts: ArtifactStore, digest: str) -> Path:
        """The folder holding the files of the code package ``digest``, fetched from ``artifacts`` if it is not
        here yet; marked as just used.

        Raises :class:`~fluksio.flows.package.PackageError` for a package missing from the store, whose bytes do
        not match its digest, or that is unsafe to unpack; :class:`~fluksio.errors.ArtifactError` when the
        store cannot be read.
        """
        home = self.folder / _name(digest)
        now = time.monotonic()
        marked = _marked.get(home)
        if marked is not None and now - marked < MARK_EVERY_S:
            return home / FILES  # marked here a moment ago: too recently used to be evicted since
        if _touch(home):
            _marked[home] = now
            return home / FILES
        data = _fetch(artifacts, digest)
        self.folder.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(dir=self.folder, prefix=".tmp-"))
        try:
            files = unpack(data, scratch / FILES)
            (scratch / USED).write_text(str(sum(file.size for file in files)))
            scratch.chmod(0o755)  # mkdtemp makes it private; every user of a shared worker's cache reads it
            try:
                os.rename(scratch, home)
            except OSError:
                if not _touch(home):  # not a loser's rename, but a real failure (a full disk, permissions)
                    raise
                # Another process unpacked it meanwhile: use theirs, and drop this copy.
                shutil.rmtree(scratch, ignore_errors=True)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        _marked[home] = time.monotonic()
        self.evict(keep=home)
        return home / FILES

    def evict(self, keep: Path | None = None) -> list[Path]:
        """Remove least recently used packages until the rest fit in ``max_bytes``; the folders removed.

        Never ``keep`` (the package just checked out, even when it alone is larger than the limit) and never
        one used in the last :data:`IN_USE_S` seconds.
        """
        now = time.time()
        held = self._held(now)
        total = sum(package.size for package in held)
        removed = []
        for package in sorted(held, key=lambda p: p.used):
            if total <= self.max_bytes:
                break
            if package.folder == keep or now - package.used < IN_USE_S:
                continue
            if self._remove(package):
                removed.append(package.folder)
                total -= package.size
        return removed

    def _held(self, now: float) -> list[_Held]:
        """Every package in the cache; temporary folders a dead process left behind are removed on the way."""
        found = []
        try:
            entries = list(os.scandir(self.folder))
        except FileNotFoundError:
            return []
        for entry in entries:
            path = Path(entry.path)
            try:
                if entry.name.startswith("."):
                    if now - entry.stat(follow_symlinks=False).st_mtime > STALE_TEMPORARY_S:
                        shutil.rmtree(path, ignore_errors=True)
                    continue
                mark = path / USED
                found.append(_Held(path, mark.stat().st_mtime, int(mark.read_text() or 0)))
            except (OSError, ValueError):  # gone meanwhile (another process evicted it), or not ours
                continue
        return found

    def _remove(self, package: _Held) -> bool:
        """Move the package aside, then delete it: a checkout never finds half of one. A package a process
        holds (:func:`hold`), or used after it was looked at (its mark moved on), stays; ``True`` when it is gone."""
        if _held_elsewhere(package.folder):
            return False  # a package server or a call's interpreter imports from it: a long call's lazy imports
        _marked.pop(package.folder, None)
        aside = Path(tempfile.mkdtemp(dir=self.folder, prefix=".evicted-")) / package.folder.name
        try:
            os.rename(package.folder, aside)
        except OSError:
            shutil.rmtree(aside.parent, ignore_errors=True)
            return False  # evicted by another process already, or in use on a filesystem that refuses
        try:
            used_again = (aside / USED).stat().st_mtime > package.used
        except OSError:
            used_again = False
        if used_again:
            try:
                os.rename(aside, package.folder)
                shutil.rmtree(aside.parent, ignore_errors=True)
                return False
            except OSError:
                pass  # checked out afresh meanwhile: this copy is not needed
        shutil.rmtree(aside.parent, ignore_errors=True)
        log.info("code cache %s: evicted %s (%d bytes) as the least recently used", self.folder, package.folder.name,
                 package.size)
        return True


def _name(digest: str) -> str:
    """``sha256-<hex>``: the folder of a package (no ``:``, which a path on ``sys.path`` and a flow reference
    would misread); anything but a sha256 digest is refused before it names a path."""
    algorithm, _, hexdigest = digest.partition(":")
    if algorithm != ALGORITHM or len(hexdigest) != 64 or not all(c in "0123456789abcdef" for c in hexdigest):
        raise PackageError(f"{digest!r} is not a code package's digest ('sha256:' and 64 lowercase hex characters)")
    return f"{algorithm}-{hexdigest}"


def hold(files: Path) -> None:
    """Keep the package whose files are in ``files`` from being evicted while this process lives.

    A shared lock on its last-use mark, taken by the process that imports the package (a package server, and
    the runners and children it forks, which inherit it; a fresh interpreter): the kernel drops it when the
    process ends, however it ends, so nothing has to remember to let go. Eviction asks for the lock
    exclusively, and leaves a package it cannot get.
    """
    try:
        descriptor = os.open(files.parent / USED, os.O_RDONLY)
        fcntl.flock(descriptor, fcntl.LOCK_SH)
    except OSError:
        return  # no mark (not a cache's folder): nothing to hold
    _holding.append(descriptor)  # kept open for the process's life


def _held_elsewhere(home: Path) -> bool:
    """Whether a process holds the package in ``home`` (:func:`hold`)."""
    try:
        descriptor = os.open(home / USED, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(descriptor)  # closing drops the lock this look took
    return False


def _touch(home: Path) -> bool:
    """Mark the package in ``home`` as just used; ``False`` when there is none."""
    try:
        os.utime(home / USED)
    except FileNotFoundError:
        return False
    except PermissionError:  # another user's package in a shared cache: usable, its use just not noted
        return (home / USED).is_file()
    return True


def _fetch(artifacts: ArtifactStore, digest: str) -> bytes:
    """The package's bytes from the store, checked against ``digest``."""
    try:
        data = artifacts.get(digest)
    except ArtifactError:
        if artifacts.exists(digest):
            raise  # there, but not readable now (an outage): the store's own words
        raise PackageError(f"code package {digest} is not in the artifact store this worker reads: the submit "
                           "that made its run stored it there; does this machine use the same "
                           "FLUKSIO_ARTIFACTS_DIR as the submitters (or was the package removed)?") from None
    if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
        raise PackageError(f"code package {digest} in the artifact store does not match its digest: altered or "
                           "corrupted; refused, never imported")
    return data
