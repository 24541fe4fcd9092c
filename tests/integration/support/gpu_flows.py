"""Flows of the warm-start tests (GPU calls forked from a worker's fork server); registered through FLUKSIO_FLOWS.

With ``TEST_FAKE_CUDA_AT_IMPORT=1`` importing this module counts as starting CUDA: it loads a copy of a
harmless shared library under the name ``libcuda.so.1``, which is what fluksio/execution/cuda.py looks for
in ``/proc/self/maps`` (the real driver library would be found the same way).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import shutil
import time
from pathlib import Path

from fluksio import Artifact, Flow, Resources

#: Folder where nodes leave marks the tests wait for (set by the test harness).
MARKS = Path(os.environ.get("TEST_FLUKSIO_MARKS", "/tmp/fluksio-test-marks"))
ONE_GPU = Resources(cpus=1, gpus=1)


def _harmless_library() -> Path:
    """The file of zlib's shared library, as this process mapped it."""
    ctypes.CDLL(ctypes.util.find_library("z") or "libz.so.1")
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split()
        if len(fields) == 6 and Path(fields[5]).name.startswith("libz.so"):
            return Path(fields[5])
    raise RuntimeError("no zlib shared library to copy")


if os.environ.get("TEST_FAKE_CUDA_AT_IMPORT") == "1":
    _fake = MARKS.parent / "fake-cuda" / f"{os.getpid()}" / "libcuda.so.1"
    _fake.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_harmless_library(), _fake)
    ctypes.CDLL(str(_fake))


def whoami() -> dict:
    """The GPU ids this process sees, its pid, and its parent's command line (a fork server, or a pool process)."""
    parent = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    return {"devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "pid": os.getpid(), "parent": parent}


def leave_pid_mark(tag: str) -> None:
    MARKS.mkdir(parents=True, exist_ok=True)
    (MARKS / f"{tag}.{os.getpid()}").write_text("started")


trio = Flow("gpu_trio", inputs={"pause": (float, 1.0)})
for _index in range(3):
    def _one(pause: float) -> dict:
        started = time.time()
        time.sleep(pause)
        return {**whoami(), "span": [started, time.time()]}

    trio.node(_one, name=f"gpu{_index}", provides=f"seen{_index}", requires=["pause"], device="gpu",
              resources=ONE_GPU)


stuck = Flow("gpu_stuck", inputs={"tag": str}, outputs=["x"])


@stuck.node(provides="x", device="gpu", resources=ONE_GPU)
def sleep_on_gpu(tag: str) -> str:
    leave_pid_mark(tag)
    time.sleep(3600)
    return tag


victim = Flow("gpu_victim", inputs={"tag": str}, outputs=["x"])


@victim.node(provides="x", device="victim", resources=ONE_GPU)
def sleep_on_victim(tag: str) -> str:
    leave_pid_mark(tag)
    time.sleep(3600)
    return tag


overdue = Flow("gpu_overdue", inputs={"tag": str}, outputs=["x"])


@overdue.node(provides="x", device="gpu", resources=ONE_GPU, timeout_s=1.0)
def past_its_timeout(tag: str) -> str:
    leave_pid_mark(tag)
    os.write(1, b"going to sleep\n")
    time.sleep(60)
    return tag


talk = Flow("gpu_talk", outputs=["seen", "blob"])


@talk.node(provides=["seen", "blob"], streams=["loss"], device="gpu", resources=ONE_GPU)
def talkative(emit) -> dict:  # type: ignore[no-untyped-def]
    print("printed by the node")
    logging.getLogger("gpu_flows").warning("logged by the node")
    os.write(1, b"written to fd 1\n")
    os.write(2, b"written to fd 2\n")
    for step in range(3):
        emit("loss", 1.0 / (step + 1))
    return {"seen": whoami(), "blob": Artifact.from_bytes(b"made on a GPU", name="blob.bin")}


crash = Flow("gpu_crash", outputs=["x"])


@crash.node(provides="x", device="gpu", resources=ONE_GPU)
def exits_at_once() -> int:
    os.write(2, b"about to exit\n")
    os._exit(7)


on_cudainit = Flow("gpu_on_cudainit", outputs=["seen"])


@on_cudainit.node(provides="seen", device="cudainit", resources=ONE_GPU)
def seen_on_cudainit() -> dict:
    return whoami()
