"""Flows whose nodes pass typed values: arrays, frames, models, dataclasses, enums and a user's codec.

Workers register them through ``FLUKSIO_FLOWS=tests.integration.support.codec_flows``; the embedded tests use them
directly. The producing nodes ask for a machine labelled ``alpha``, the receiving ones for ``beta``
(``prefer``: the embedded machine, which carries neither, runs both), so on the cluster every value
crosses from one worker process to another.
"""

from __future__ import annotations

import dataclasses
import os
from datetime import date
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel

import fluksio.codecs
from fluksio import Flow

#: Folder where nodes leave a mark per call (set by the cluster harness).
MARKS = Path(os.environ.get("TEST_FLUKSIO_MARKS", "/tmp/fluksio-test-marks"))


class Cfg(BaseModel):
    lr: float
    day: date


@dataclasses.dataclass(frozen=True)
class Box:
    width: int
    tags: tuple[str, ...]


class Colour(Enum):
    RED = "red"
    BLUE = "blue"


class Interval:
    """A type of the user's own, carried by the codec registered below: ``lo..hi`` as text."""

    def __init__(self, lo: float, hi: float) -> None:
        self.lo, self.hi = lo, hi

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Interval) and (self.lo, self.hi) == (other.lo, other.hi)

    def __repr__(self) -> str:
        return f"Interval({self.lo}, {self.hi})"


def _encode_interval(value: Interval) -> bytes:
    return f"{value.lo!r}..{value.hi!r}".encode()


def _decode_interval(data: bytes) -> Interval:
    lo, hi = data.decode().split("..")
    return Interval(float(lo), float(hi))


# Registered where the flows are: every process that imports this module (each worker) has the codec.
fluksio.codecs.register(Interval, "interval", _encode_interval, _decode_interval, media_type="text/plain",
                        suffix=".txt")


def expected_values(n: int) -> dict[str, Any]:
    """What ``make`` returns for ``n``: rebuilt on the receiving machine to compare what arrived."""
    return {
        "arr": np.linspace(0.0, 1.0, n) ** 2,
        "frame": pd.DataFrame({"when": pd.date_range("2026-01-01", periods=n, freq="h"),
                               "value": np.arange(n, dtype=np.float64) / 3, "label": [f"r{i}" for i in range(n)]}),
        "cfg": Cfg(lr=0.1 * n, day=date(2026, 1, 2)),
        "box": Box(n, ("a", "b")),
        "colour": Colour.BLUE,
        "span": Interval(-1.5, float(n)),
    }


def mark(tag: str) -> None:
    MARKS.mkdir(parents=True, exist_ok=True)
    (MARKS / f"{tag}.{os.getpid()}.{len(list(MARKS.glob(tag + '.*')))}").write_text(str(os.getcwd()))


typed = Flow("codec_typed", inputs={"n": (int, 5)})


@typed.node(provides=["arr", "frame", "cfg", "box", "colour", "span"], device="alpha", device_policy="prefer")
def make(n: int) -> dict[str, Any]:
    return expected_values(n)


@typed.node(provides="report", device="beta", device_policy="prefer")
def check(arr: np.ndarray, frame: pd.DataFrame, cfg: Cfg, box: Box, colour: Colour, span: Interval,
          n: int) -> dict[str, Any]:
    """What arrived here, as this process sees it: each value's type, and whether it equals what was sent."""
    want = expected_values(n)
    got = {"arr": arr, "frame": frame, "cfg": cfg, "box": box, "colour": colour, "span": span}
    equal = {
        "arr": bool(np.array_equal(arr, want["arr"])) and arr.dtype == want["arr"].dtype,
        "frame": frame.equals(want["frame"]) and frame.dtypes.equals(want["frame"].dtypes),
        "cfg": cfg == want["cfg"], "box": box == want["box"], "colour": colour is want["colour"],
        "span": span == want["span"],
    }
    return {"types": {k: f"{type(v).__module__}.{type(v).__qualname__}" for k, v in got.items()},
            "equal": equal, "pid": os.getpid(), "cwd": os.getcwd()}


# -- values a codec cannot carry, and a parameter whose annotation does not fit ------------------------

object_array = Flow("codec_object_array")


@object_array.node(provides="arr", device="alpha", device_policy="prefer")
def make_objects() -> np.ndarray:
    return np.array([1, "two", None], dtype=object)


object_frame = Flow("codec_object_frame")


@object_frame.node(provides="table", device="alpha", device_policy="prefer")
def make_object_frame() -> pd.DataFrame:
    return pd.DataFrame({"ok": [1, 2], "things": [object(), object()]})


misannotated = Flow("codec_misannotated")


@misannotated.node(provides="frame", device="alpha", device_policy="prefer")
def make_array_not_frame() -> np.ndarray:
    return np.arange(6.0).reshape(2, 3)


@misannotated.node(provides="rows", device="beta", device_policy="prefer")
def count_rows(frame: pd.DataFrame) -> int:
    return len(frame)


# -- the run cache, references and mapped nodes ---------------------------------------------------------

cached = Flow("codec_cached", inputs={"n": int, "tag": str})


@cached.node(provides="frame", device="alpha", device_policy="prefer")
def make_frame(n: int, tag: str) -> pd.DataFrame:
    mark(tag)
    return expected_values(n)["frame"]


@cached.node(provides="total", device="beta", device_policy="prefer")
def total(frame: pd.DataFrame) -> float:
    return float(frame["value"].sum())


consume = Flow("codec_consume", inputs={"frame": pd.DataFrame}, outputs=["rows", "first"])


@consume.node(provides=["rows", "first"], device="beta", device_policy="prefer")
def describe(frame: pd.DataFrame) -> dict[str, Any]:
    return {"rows": len(frame), "first": frame["label"].iloc[0]}


shards = Flow("codec_shards", inputs={"count": int}, outputs=["sizes", "total", "joined"])


@shards.node(provides="parts", device="alpha", device_policy="prefer")
def split(count: int) -> list[pd.DataFrame]:
    return [pd.DataFrame({"x": np.arange(i + 1, dtype=np.int64) * 10}) for i in range(count)]


@shards.node(provides="sizes", map={"part": "parts"}, device="beta", device_policy="prefer")
def size(part: pd.DataFrame) -> dict[str, Any]:
    return {"rows": len(part), "sum": int(part["x"].sum()), "type": type(part).__name__}


@shards.node(provides="total")
def add_up(sizes: list[dict[str, Any]]) -> int:
    return sum(s["sum"] for s in sizes)


@shards.node(provides="scaled", map={"part": "parts"})
def scale(part: pd.DataFrame) -> pd.DataFrame:
    return part * 2  # each element returns a frame: the node's message is the list of them


@shards.node(provides="joined")
def join(scaled: list[pd.DataFrame]) -> dict[str, Any]:
    joined = pd.concat(scaled, ignore_index=True)
    return {"rows": len(joined), "sum": int(joined["x"].sum()), "types": sorted({type(f).__name__ for f in scaled})}


big = Flow("codec_big", inputs={"megabytes": int}, outputs=["mean"])


@big.node(provides="values")
def fill(megabytes: int) -> np.ndarray:
    return np.full(megabytes * (1 << 20) // 8, 0.5, dtype=np.float64)


@big.node(provides="mean")
def mean(values: np.ndarray) -> float:
    return float(values.mean())


on_gpu = Flow("codec_on_gpu", outputs=["seen"])


@on_gpu.node(provides=["weights", "devices"], device="gpu", resources={"cpus": 1, "gpus": 1})
def train_on_gpu() -> dict[str, Any]:
    """Runs in the child process a GPU call gets (CUDA_VISIBLE_DEVICES set to its grant)."""
    return {"weights": np.arange(12, dtype=np.float32).reshape(3, 4), "devices": os.environ.get("CUDA_VISIBLE_DEVICES")}


@on_gpu.node(provides="seen", device="alpha", device_policy="prefer")
def inspect_weights(weights: np.ndarray, devices: str) -> dict[str, Any]:
    return {"type": type(weights).__name__, "dtype": str(weights.dtype), "shape": list(weights.shape),
            "sum": float(weights.sum()), "devices": devices}
