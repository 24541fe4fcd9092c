"""Has this process started CUDA? One that has cannot be forked for a GPU call.

CUDA's driver state does not survive ``fork()``: a child of a process that initialized the driver fails on
its first CUDA call (or worse, shares the parent's context), and the driver read ``CUDA_VISIBLE_DEVICES``
when it started, so a child could not be given other GPUs anyway. The fork server
(fluksio/execution/forkserver.py) asks :func:`cuda_in_use` once the flow modules are imported; if a module
started CUDA at import time, the worker's GPU calls start in a fresh interpreter each instead.

Two signs, either enough:

* PyTorch is loaded and says ``torch.cuda.is_initialized()``;
* a file whose name starts with ``libcuda.so`` (the driver library, whoever loaded it: PyTorch, JAX, CuPy,
  Numba, a ctypes call) is mapped into this process (``/proc/self/maps``). That is conservative: a library
  that links the driver without starting it (CuPy does) counts too. It is also the marker tests set: loading
  any shared library under a file name ``libcuda.so…`` makes this process count as one that started CUDA.
"""

from __future__ import annotations

import sys
from pathlib import Path

#: Where Linux lists the files mapped into this process.
MAPS = Path("/proc/self/maps")
#: The driver library's file name starts with this (``libcuda.so.1``, ``libcuda.so.550.54.15``).
DRIVER_LIBRARY = "libcuda.so"


def cuda_in_use(maps: Path = MAPS) -> str | None:
    """Why this process counts as one that started CUDA, or ``None`` if it did not."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        if cuda is not None and cuda.is_initialized():
            return "torch.cuda.is_initialized() is true"
    except Exception:  # noqa: BLE001 - a half-imported or odd torch: the maps below still tell
        pass
    mapped = driver_mapped(maps)
    return f"the CUDA driver library {mapped} is loaded" if mapped else None


def driver_mapped(maps: Path = MAPS) -> str | None:
    """The path of the CUDA driver library if it is mapped into this process (``None`` where there are no maps)."""
    try:
        lines = maps.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and Path(fields[5]).name.startswith(DRIVER_LIBRARY):
            return fields[5]
    return None
