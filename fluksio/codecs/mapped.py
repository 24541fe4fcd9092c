"""Arrays mapped from their artifact files, counted: each mapping holds a file descriptor while it lives.

Mapping a large ``.npy`` file instead of reading it costs a millisecond where ``np.load`` costs a copy of
the whole (see ``builtin.MAP_BYTES``), but Python's mmap (before 3.13) keeps a duplicate of the file's
descriptor for as long as the mapping lives. A node that received ten thousand mapped arrays would hold
ten thousand descriptors, and its process would run out of them: its broker connection, its logs and its
next file with them. So a process keeps at most a quarter of its descriptor limit mapped at once, and
reads the arrays past that.
"""

from __future__ import annotations

import resource
import threading
import weakref
from pathlib import Path
from types import ModuleType
from typing import Any

#: The share of the process's file-descriptor limit that mapped arrays may hold.
SHARE_OF_DESCRIPTORS = 4

_lock = threading.Lock()
_live = 0


def most_mapped() -> int:
    """How many arrays this process may have mapped at once (its soft descriptor limit, now, over
    :data:`SHARE_OF_DESCRIPTORS`)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft // SHARE_OF_DESCRIPTORS if soft != resource.RLIM_INFINITY else 1 << 16


def live() -> int:
    """Arrays this process has mapped that are still in use (by the array or any view of it)."""
    return _live


def map_array(np: ModuleType, path: Path) -> Any | None:
    """The array in the ``.npy`` file at ``path``, mapped copy-on-write (the node may change it; the file
    never changes), as a plain ``ndarray``; ``None`` when this process has as many mapped as it may, or the
    filesystem cannot map files: the caller reads it instead."""
    global _live
    with _lock:
        if _live >= most_mapped():
            return None
        _live += 1
    try:
        mapped = np.load(path, mmap_mode="c", allow_pickle=False)
    except (OSError, ValueError):
        _unmapped()
        return None
    # The mapping lives while any view of it does: counted until the last one goes.
    weakref.finalize(mapped, _unmapped)
    return mapped.view(np.ndarray)


def _unmapped() -> None:
    global _live
    with _lock:
        _live -= 1
