"""Artifacts on a (possibly shared) filesystem: ``<root>/<algorithm>/ab/abcdef…`` (artifacts/digests.py)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, cast

from fluksio.artifacts.artifact import Artifact
from fluksio.artifacts.digests import relative_path
from fluksio.artifacts.hashing import HashingWriter
from fluksio.artifacts.store import ArtifactStore
from fluksio.errors import ArtifactError


class LocalArtifactStore(ArtifactStore):
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def _file(self, digest: str) -> Path:
        return self.root / relative_path(digest)

    def put(self, artifact: Artifact) -> Artifact:
        target = self._file(artifact.digest)
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            # Written beside the target and then named, so a reader never sees half a file.
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as handle:
                    if artifact._source is not None:
                        with artifact._source.open("rb") as src:
                            shutil.copyfileobj(src, handle)
                    else:
                        handle.write(artifact.read_bytes())
                # mkstemp makes the file private; artifacts are shared by every host and user of the store.
                os.chmod(tmp, 0o644)
                publish(Path(tmp), target)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        return Artifact(artifact.digest, artifact.size, artifact.media_type, artifact.name, store=self)

    def get(self, digest: str) -> bytes:
        try:
            return self._file(digest).read_bytes()
        except FileNotFoundError:
            raise ArtifactError(f"artifact {digest} is gone from {self.root}") from None

    def exists(self, digest: str) -> bool:
        return self._file(digest).is_file()

    def path(self, digest: str) -> Path:
        file = self._file(digest)
        if not file.is_file():
            raise ArtifactError(f"artifact {digest} is gone from {self.root}")
        return file

    def put_stream(self, write: Callable[[BinaryIO], None], name: str | None = None,
                   media_type: str = "application/octet-stream") -> Artifact:
        """Write straight into a temporary file of the store, then rename it to its digest: the bytes are
        written once and never copied (see :meth:`ArtifactStore.put_stream`)."""
        scratch = self.root / "tmp"
        scratch.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=scratch, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as raw:
                hashing = HashingWriter(raw)
                write(cast(BinaryIO, hashing))
            target = self._file(hashing.digest)
            if target.exists():
                Path(tmp).unlink()  # the same bytes are there already
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                os.chmod(tmp, 0o644)
                publish(Path(tmp), target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return Artifact(hashing.digest, hashing.size, media_type, name, store=self)

    def open(self, digest: str) -> BinaryIO:
        try:
            return self._file(digest).open("rb")
        except FileNotFoundError:
            raise ArtifactError(f"artifact {digest} is gone from {self.root}") from None


def publish(tmp: Path, target: Path) -> None:
    """Give the finished file ``tmp`` the name ``target``, unless another writer of the same bytes got there
    first: a file under a digest's name is never replaced, for a reader on another host may have it open or
    mapped, and over NFS a replaced file is gone under it (a mapped one kills its reader on the next page).
    ``tmp`` is gone afterwards either way."""
    try:
        os.link(tmp, target)
    except FileExistsError:
        pass  # the same bytes are there already
    except OSError:  # a filesystem without hard links: a rename still never shows half a file
        os.replace(tmp, target)
        return
    tmp.unlink()
