"""Fewer points for a chart, keeping what a line of them must not lose: each bucket's lowest and highest value.

Pure: no I/O. A series of 100,000 steps drawn 600 pixels wide shows at most a few hundred distinct
x positions; averaging would hide a loss spike, dropping every k-th point could too. Min and max per
bucket keep the envelope the eye reads (the "min-max" downsampling of most metric dashboards).
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter

#: The points a series gets when the request does not say (the metrics API's ``points``).
DEFAULT_POINTS = 2_000
#: The fewest points a request may ask for (one bucket: its min and its max).
MIN_POINTS = 2

_value = itemgetter(1)


def downsample(points: Sequence[tuple[int, float]], limit: int = DEFAULT_POINTS) -> list[tuple[int, float]]:
    """At most ``limit`` of ``points`` (``(step, value)``, in step order), in step order.

    A series of ``limit`` points or fewer comes back whole. A longer one is cut into ``limit // 2``
    buckets of consecutive points (sizes differ by at most one), and of each bucket the point with the
    lowest value and the one with the highest are kept (the first of equal ones; once, when they are the
    same point). So every kept point is a real point, and no bucket's extreme is lost.
    """
    if limit < MIN_POINTS:
        raise ValueError(f"limit must be at least {MIN_POINTS}, got {limit}")
    count = len(points)
    if count <= limit:
        return list(points)
    buckets = limit // 2
    kept: list[tuple[int, float]] = []
    for bucket in range(buckets):
        chunk = points[bucket * count // buckets:(bucket + 1) * count // buckets]
        low, high = min(chunk, key=_value), max(chunk, key=_value)
        if low is high:
            kept.append(low)
        else:
            kept.extend((low, high) if low[0] < high[0] else (high, low))
    return kept
