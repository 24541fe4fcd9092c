"""Telling whether a process started CUDA (and so cannot be forked for a GPU call): pure, no GPU needed."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from fluksio.execution.cuda import cuda_in_use, driver_mapped

MAPS_LINE = "7f1c2a000000-7f1c2a021000 r-xp 00000000 08:01 1234  {path}\n"


def maps_with(tmp_path: Path, *paths: str) -> Path:
    maps = tmp_path / "maps"
    maps.write_text("".join(MAPS_LINE.format(path=p) for p in paths) + "7ffd1000-7ffd2000 rw-p 00000000 00:00 0\n")
    return maps


def test_a_process_without_the_driver_library_did_not_start_cuda(tmp_path: Path) -> None:
    maps = maps_with(tmp_path, "/usr/lib/x86_64-linux-gnu/libz.so.1.2.13", "/usr/lib/libcudart.so.12")
    assert driver_mapped(maps) is None and cuda_in_use(maps) is None


@pytest.mark.parametrize("name", ["libcuda.so", "libcuda.so.1", "libcuda.so.550.54.15"])
def test_the_driver_library_mapped_counts_whoever_loaded_it(tmp_path: Path, name: str) -> None:
    maps = maps_with(tmp_path, "/usr/lib/libz.so.1", f"/usr/lib/x86_64-linux-gnu/{name}")
    assert driver_mapped(maps) == f"/usr/lib/x86_64-linux-gnu/{name}"
    assert cuda_in_use(maps) == f"the CUDA driver library /usr/lib/x86_64-linux-gnu/{name} is loaded"


def test_a_path_that_merely_contains_the_name_does_not_count(tmp_path: Path) -> None:
    assert driver_mapped(maps_with(tmp_path, "/opt/libcuda.so.1.d/libz.so.1")) is None


def test_no_maps_to_read_means_no_sign(tmp_path: Path) -> None:
    assert cuda_in_use(tmp_path / "absent") is None


def test_torch_saying_it_initialized_cuda_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(is_initialized=lambda: True)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", torch)
    assert cuda_in_use(maps_with(tmp_path)) == "torch.cuda.is_initialized() is true"
    torch.cuda = types.SimpleNamespace(is_initialized=lambda: False)  # type: ignore[attr-defined]
    assert cuda_in_use(maps_with(tmp_path)) is None
