"""Windowed usage: GPU-seconds per (pool, budget) in hour buckets, summed over a sliding window.

This is the one usage fold: the scheduler ranks budgets with it, the simulator drives it with
simulated occupancy, and the projections host it over Kafka. Time is *event* time, in epoch
seconds; an interval that spans hours is split at hour boundaries, so a late or out-of-order
report lands in the bucket(s) where the occupancy happened, never in "now".

The window is hour-granular: at time ``t`` it covers the ``window / 1h`` buckets ending with the
one containing ``t`` (for 7 days: the current hour and the 167 before it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from events.times import DEFAULT_WINDOW_S, HOUR


def bucket_of(t: float) -> int:
    """Index of the hour bucket containing epoch second ``t``."""
    return int(t // HOUR)


def split_by_hour(start: float, end: float) -> list[tuple[int, float]]:
    """``[(bucket, seconds)]`` of the interval ``[start, end)`` cut at hour boundaries."""
    pieces: list[tuple[int, float]] = []
    t = start
    while t < end:
        bucket = bucket_of(t)
        boundary = (bucket + 1) * HOUR
        stop = min(end, boundary)
        pieces.append((bucket, stop - t))
        t = stop
    return pieces


@dataclass(slots=True)
class _Series:
    """Buckets of one (pool, budget), with a running sum over the current window."""

    allocated: dict[int, float] = field(default_factory=dict)
    unallocated: dict[int, float] = field(default_factory=dict)
    window_sum: float = 0.0
    window_first: int | None = None  # first bucket included in window_sum
    last_bucket: int = -(2**62)  # latest bucket holding any allocated usage

    def add(self, bucket: int, seconds: float, allocated: bool) -> None:
        target = self.allocated if allocated else self.unallocated
        target[bucket] = target.get(bucket, 0.0) + seconds
        if allocated:
            self.last_bucket = max(self.last_bucket, bucket)
            if self.window_first is not None and bucket >= self.window_first:
                self.window_sum += seconds

    def forget_before(self, first: int) -> None:
        """Drop the buckets before ``first`` (the running sum is redone if it covered them)."""
        for buckets in (self.allocated, self.unallocated):
            for bucket in [b for b in buckets if b < first]:
                del buckets[bucket]
        if self.window_first is not None and self.window_first < first:
            self.window_first = None

    def allocated_in_window(self, first: int, last: int) -> float:
        """Allocated GPU-seconds in buckets ``first..last`` (usage recorded for later hours,
        as an audit querying the past will find, is not part of that window)."""
        total = self._from(first)
        for bucket in range(last + 1, self.last_bucket + 1):
            total -= self.allocated.get(bucket, 0.0)
        return max(0.0, total)

    def _from(self, first: int) -> float:
        if self.window_first is None or first < self.window_first:
            # First query, or a query further back than before: sum afresh.
            self.window_sum = sum(s for b, s in self.allocated.items() if b >= first)
        else:
            for bucket in range(self.window_first, first):
                self.window_sum -= self.allocated.get(bucket, 0.0)
            if self.window_sum < 1e-6:
                self.window_sum = max(0.0, self.window_sum)
        self.window_first = first
        return self.window_sum


class UsageWindow:
    """GPU-seconds by (pool, budget, hour); window sums of allocated usage."""

    def __init__(self, window_s: int = DEFAULT_WINDOW_S) -> None:
        if window_s < HOUR or window_s % HOUR:
            raise ValueError("window_s must be a positive whole number of hours")
        self.window_s = window_s
        self._series: dict[tuple[str, str], _Series] = {}

    def add_interval(
        self, pool: str, budget: str, gpus: int, start: float, end: float, allocated: bool
    ) -> None:
        """Record ``gpus`` GPUs held by ``budget`` in ``pool`` during ``[start, end)``."""
        if end <= start or gpus <= 0:
            return
        series = self._series.get((pool, budget))
        if series is None:
            series = self._series[(pool, budget)] = _Series()
        for bucket, seconds in split_by_hour(start, end):
            series.add(bucket, seconds * gpus, allocated)

    def add_seconds(
        self, pool: str, budget: str, bucket: int, gpu_seconds: float, allocated: bool
    ) -> None:
        """Add (or, for a correction, subtract) GPU-seconds already attributed to a bucket."""
        if gpu_seconds == 0:
            return
        series = self._series.get((pool, budget))
        if series is None:
            series = self._series[(pool, budget)] = _Series()
        series.add(bucket, gpu_seconds, allocated)

    def unallocated(self, pool: str, budget: str, now: float) -> float:
        series = self._series.get((pool, budget))
        if series is None:
            return 0.0
        first, last = self.window_first_bucket(now), bucket_of(now)
        return sum(s for b, s in series.unallocated.items() if first <= b <= last)

    def forget_before(self, now: float) -> None:
        """Drop every bucket older than the window at ``now``: for a reader whose queries never
        go back past it (charging snapshots the window at its latest event time), so its
        memory holds a window, not the whole history. A series emptied stays, so its budget is
        still listed (with zero)."""
        first = self.window_first_bucket(now)
        for series in self._series.values():
            series.forget_before(first)

    def pools(self) -> list[str]:
        return sorted({pool for pool, _budget in self._series})

    def window_first_bucket(self, now: float) -> int:
        return bucket_of(now) - self.window_s // HOUR + 1

    def allocated(self, pool: str, budget: str, now: float) -> float:
        """Allocated GPU-seconds of ``budget`` in ``pool`` within the window ending at ``now``."""
        series = self._series.get((pool, budget))
        if series is None:
            return 0.0
        return series.allocated_in_window(self.window_first_bucket(now), bucket_of(now))

    def budgets(self, pool: str) -> list[str]:
        return sorted(budget for p, budget in self._series if p == pool)

    def allocated_by_budget(self, pool: str, now: float) -> dict[str, float]:
        first, last = self.window_first_bucket(now), bucket_of(now)
        return {
            budget: series.allocated_in_window(first, last)
            for (p, budget), series in self._series.items()
            if p == pool
        }

    def hourly(self, pool: str, budget: str) -> tuple[dict[int, float], dict[int, float]]:
        """(allocated, unallocated) GPU-seconds per hour bucket: for reports and metrics."""
        series = self._series.get((pool, budget))
        if series is None:
            return {}, {}
        return dict(series.allocated), dict(series.unallocated)
