"""Time intervals, such as the spans of a run's calls from start to finish, and how many of them overlapped."""

from __future__ import annotations


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    """The most intervals (start, end) under way at one moment: how many calls ran at once, at most."""
    points = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    best = current = 0
    for _, delta in points:
        current += delta
        best = max(best, current)
    return best
