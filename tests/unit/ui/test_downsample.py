"""Min-max downsampling of a metric series: at most N real points, each bucket's extremes kept."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fluksio.ui.downsample import downsample


def test_a_short_series_comes_back_whole() -> None:
    points = [(s, float(s % 3)) for s in range(10)]
    assert downsample(points, 10) == points
    assert downsample([], 4) == []


def test_a_spike_survives_where_every_kth_point_would_lose_it() -> None:
    points = [(s, 1.0) for s in range(100_000)]
    points[54_321] = (54_321, 50.0)
    points[7] = (7, -3.0)
    kept = downsample(points, 200)
    assert len(kept) <= 200
    assert (54_321, 50.0) in kept and (7, -3.0) in kept
    assert [s for s, _ in kept] == sorted(s for s, _ in kept)


def test_fewer_than_two_points_cannot_be_asked_for() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        downsample([(0, 1.0)], 1)


@given(values=st.lists(st.floats(allow_nan=False, allow_infinity=False, width=32), min_size=1, max_size=400),
       limit=st.integers(min_value=2, max_value=60))
def test_at_most_limit_real_points_in_step_order_with_every_bucket_s_min_and_max(values: list[float],
                                                                                    limit: int) -> None:
    points = list(enumerate(values))
    kept = downsample(points, limit)
    assert len(kept) <= limit
    assert set(kept) <= set(points)
    assert [s for s, _ in kept] == sorted({s for s, _ in kept})
    if len(points) <= limit:
        assert kept == points
        return
    buckets = limit // 2
    for b in range(buckets):
        chunk = points[b * len(points) // buckets:(b + 1) * len(points) // buckets]
        assert min(v for _, v in chunk) in {v for s, v in kept if chunk[0][0] <= s <= chunk[-1][0]}
        assert max(v for _, v in chunk) in {v for s, v in kept if chunk[0][0] <= s <= chunk[-1][0]}
    assert min(v for _, v in kept) == min(values) and max(v for _, v in kept) == max(values)
