"""Flows the object-store tests run on real workers; the workers register them through FLUKSIO_FLOWS.

Each node reports the working directory it ran in, so a test can show that the two hosts shared no folder.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from fluksio import Artifact, Flow

exchange = Flow("exchange", inputs={"size_mb": (int, 50)}, outputs=["blob", "made_in", "read"])


@exchange.node(provides=["blob", "made_in"], device="maker")
def make(size_mb: int) -> dict[str, object]:
    """``size_mb`` MB of bytes no other test makes, written in 1 MB pieces to a file of this worker's own."""
    folder = Path(tempfile.mkdtemp(prefix="made-", dir=os.getcwd()))
    file = folder / "blob.bin"
    with file.open("wb") as handle:
        for index in range(size_mb):
            handle.write(hashlib.sha256(f"exchange {index}".encode()).digest() * (1 << 15))
    return {"blob": Artifact.from_path(file), "made_in": os.getcwd()}


@exchange.node(provides="read", device="reader")
def read(blob: Artifact) -> dict[str, object]:
    """What this worker got: the local file it read, where it ran, and the bytes' digest and size."""
    hasher = hashlib.sha256()
    with blob.path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            hasher.update(chunk)
    return {"digest": "sha256:" + hasher.hexdigest(), "size": blob.path.stat().st_size,
            "path": str(blob.path.resolve()), "cwd": os.getcwd()}
