"""Peak memory of storing and reading back one large artifact through the configured store (a child process).

    python tests/integration/support/artifact_rss.py FILE SIZE_BYTES   (settings from FLUKSIO_* variables)

Makes FILE a sparse file of SIZE_BYTES with a little data at each end (so no disk is spent on it), then
prints one JSON line: the resident set before each step, the peak growth while ``Artifact.from_path``
digests it, while the store uploads it, and while a store with an empty cache reads it back to a local file,
in bytes; plus the seconds each took. The peak is the kernel's high-water mark (``VmHWM``), reset before
each step (``/proc/self/clear_refs``), so nothing between two samples is missed and nothing before counts.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _status(field: str) -> int:
    with open("/proc/self/status") as status:
        found = re.search(rf"^{field}:\s+(\d+) kB", status.read(), re.MULTILINE)
    assert found is not None, field
    return int(found.group(1)) * 1024


def measured(step: Callable[[], Any]) -> tuple[Any, int, float]:
    """``step()``'s result, how far the resident set rose above where it stood before, and the seconds."""
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # resets the high-water mark to the resident set now
    before = _status("VmRSS")
    started = time.monotonic()
    result = step()
    return result, _status("VmHWM") - before, time.monotonic() - started


def sparse_file(path: Path, size: int) -> None:
    with path.open("wb") as handle:
        handle.write(b"head" * 1024)
        handle.truncate(size)
        handle.seek(size - 4096)
        handle.write(b"tail" * 1024)


def main() -> None:
    from fluksio.artifacts import Artifact, open_store
    from fluksio.settings import load_settings

    path, size = Path(sys.argv[1]), int(sys.argv[2])
    sparse_file(path, size)
    settings = load_settings()
    store = open_store(settings, check=True)
    store.put(Artifact.from_bytes(b"warm up: imports, connections"))
    artifact, digest_growth, digest_s = measured(lambda: Artifact.from_path(path))
    stored, upload_growth, upload_s = measured(lambda: store.put(artifact))
    reader = open_store(settings.model_copy(update={"artifacts_cache": path.parent / "read-cache"}))
    reader.exists(stored.digest)  # warm up the reader's connection too
    local, download_growth, download_s = measured(lambda: reader.path(stored.digest))
    print(json.dumps({"digest": stored.digest, "size": local.stat().st_size, "resident": _status("VmRSS"),
                      "digest_growth": digest_growth, "digest_s": digest_s,
                      "upload_growth": upload_growth, "upload_s": upload_s,
                      "download_growth": download_growth, "download_s": download_s}))
    local.unlink()


if __name__ == "__main__":
    main()
