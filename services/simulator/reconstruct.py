"""Rebuilding jobs from per-minute counts of the jobs that were running.

Some public GPU-cluster traces give no table of jobs, only, for each tenant and minute, how
many jobs of a size class were running and how many GPUs they held (SenseTime's Helios Earth
cluster, May 2020, is published so). A replay needs jobs, so this module derives a set of jobs
whose running counts are, minute by minute, exactly the published ones.

Many job sets fit the same counts; the one built here follows three rules, each chosen because
real traces are so:

* **fewest starts and ends.** Between two minutes the change in jobs and GPUs is explained by
  as few starts and ends as can explain it: a job that was running and still is, is taken to
  be the same job (a trace's jobs run for hours; churn that the counts do not show cannot be
  recovered and is not invented).
* **ends are the latest-started live jobs (LIFO).** Short jobs dominate real traces, so a job
  that started recently is the likeliest to end next; a job that has run for days is left
  running. Among live jobs of the size an explanation needs, the latest started ends first.
* **sizes split evenly, in whole nodes where they can.** When several jobs start in one
  minute only their total GPUs are known; gangs (8 GPUs and more) are given whole 8-GPU nodes
  where the total allows, then the total is split as evenly as the class allows.

Where no exact explanation is found within a bounded search (or the counts themselves are
impossible for the class, e.g. 9 GPUs on one job of 1-7 GPUs), the closest one is taken and
the GPUs it misses, times the minutes they are missed for, are counted as unexplained. The
invariant the tests keep: when nothing is unexplained, summing the rebuilt jobs minute by
minute gives back the input counts exactly.

Pure: no I/O, no clock; minutes are plain integers (the caller's epoch).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

#: How many ends beyond the fewest the counts force a minute's search tries first. A change in
#: GPUs that the fewest ends cannot explain (a job of 8 GPUs becoming one of 16) needs one or
#: two more ends and restarts; three have explained every minute of the Helios Earth counts,
#: and a wider search (see ``_plan``) is only made where they do not.
EXTRA_ENDS = 3


@dataclass(frozen=True, slots=True)
class SizeClass:
    """The sizes a class of jobs may have: ``min_gpus`` to ``max_gpus`` GPUs (``None``:
    unbounded), split by preference into multiples of ``multiple`` (a node's GPUs for gangs)."""

    min_gpus: int
    max_gpus: int | None = None
    multiple: int = 1

    def __post_init__(self) -> None:
        if self.min_gpus < 1:
            raise ValueError("min_gpus must be >= 1")
        if self.max_gpus is not None and self.max_gpus < self.min_gpus:
            raise ValueError("max_gpus must be >= min_gpus")
        if self.multiple < 1:
            raise ValueError("multiple must be >= 1")


#: Jobs of 8 GPUs and more, given whole 8-GPU nodes where they can be (Helios' ``noless_8``).
GANGS = SizeClass(min_gpus=8, max_gpus=None, multiple=8)
#: Jobs of 1 to 7 GPUs (Helios' ``less_8``).
SMALL = SizeClass(min_gpus=1, max_gpus=7)


@dataclass(frozen=True, slots=True)
class RebuiltJob:
    """One rebuilt job: running from minute ``start`` up to (not including) minute ``end``;
    ``end`` is ``None`` for a job still running at the last input minute."""

    start: int
    end: int | None
    gpus: int


@dataclass(frozen=True, slots=True)
class Reconstruction:
    """The rebuilt jobs in start order, and what they fail to explain: GPU-minutes by which
    their running GPUs differ from the input's, and the number of input minutes that differ.
    Running job counts always match (any job count can be reached by starts and ends)."""

    jobs: tuple[RebuiltJob, ...]
    unexplained_gpu_minutes: int
    inexact_minutes: int


@dataclass(slots=True)
class _Live:
    start: int
    gpus: int
    order: int  # the how-manieth start it was: ties of one minute are kept in that order


@dataclass(frozen=True, slots=True)
class _Plan:
    """A minute's explanation: positions (in ``live``) of the jobs that end, the sizes of the
    jobs that start."""

    ends: tuple[int, ...]
    starts: tuple[int, ...]


def reconstruct(
    samples: Sequence[tuple[int, int, int]],
    size_class: SizeClass,
    extra_ends: int = EXTRA_ENDS,
) -> Reconstruction:
    """Jobs of one size class whose running counts are ``samples``: ``(minute, running jobs,
    running GPUs)`` in strictly increasing minutes. A count holds from its minute to the next
    sample's (one minute after the last). Jobs running at the first minute start there."""
    live: list[_Live] = []  # in start order: the last is the latest started
    live_gpus = 0
    done: list[tuple[int, RebuiltJob]] = []  # (order, job)
    unexplained = 0
    inexact = 0
    miss = 0  # GPUs by which the live jobs differ from the last sample's count
    previous: int | None = None
    for minute, jobs, gpus in samples:
        if previous is not None and minute <= previous:
            raise ValueError(f"minutes must increase strictly: {minute} after {previous}")
        if jobs < 0 or gpus < 0:
            raise ValueError(f"minute {minute}: counts must be >= 0")
        if previous is not None:
            unexplained += miss * (minute - previous)
        if jobs != len(live) or gpus != live_gpus:
            plan = _plan(live, live_gpus, jobs, gpus, size_class, extra_ends)
            for position in plan.ends:  # descending, so earlier positions stay valid
                ended = live.pop(position)
                live_gpus -= ended.gpus
                done.append((ended.order, RebuiltJob(ended.start, minute, ended.gpus)))
            for size in plan.starts:
                live.append(_Live(minute, size, len(live) + len(done)))
                live_gpus += size
        miss = abs(live_gpus - gpus)
        if miss:
            inexact += 1
        previous = minute
    unexplained += miss
    done.extend((job.order, RebuiltJob(job.start, None, job.gpus)) for job in live)
    done.sort(key=lambda pair: pair[0])  # start order, and within a minute the order they began
    return Reconstruction(tuple(job for _, job in done), unexplained, inexact)


def _start_gap(size_class: SizeClass, starts: int, start_gpus: int) -> int:
    """How far ``start_gpus`` lies outside what ``starts`` jobs of the class can hold (0:
    they can hold it exactly)."""
    low = starts * size_class.min_gpus
    if start_gpus < low:
        return low - start_gpus
    if size_class.max_gpus is not None and start_gpus > starts * size_class.max_gpus:
        return start_gpus - starts * size_class.max_gpus
    if starts == 0:
        return start_gpus
    return 0


def _plan(
    live: list[_Live],
    live_gpus: int,
    jobs: int,
    gpus: int,
    size_class: SizeClass,
    extra_ends: int,
) -> _Plan:
    """The fewest ends (latest started first) and starts that take ``live`` to ``jobs`` jobs
    on ``gpus`` GPUs, or the closest to it where the counts are impossible for the class.

    Ending ``k`` jobs forces ``jobs - len(live) + k`` starts, so fewest changes means fewest
    ends. The search first allows ``extra_ends`` ends beyond those the counts force, and
    widens (four times as many, up to every live job) only while it finds no exact
    explanation of possible counts. One always exists: ending every live job and starting
    ``jobs`` fresh ones explains any counts the class allows, and each further end only
    narrows the gap (an end of a size the class allows adds one start that can hold it). So
    possible counts are always explained exactly, and impossible ones cost at most
    ``extra_ends`` spurious restarts, not a restart of everything."""
    fewest = max(0, len(live) - jobs)
    wanted = gpus - live_gpus
    # The common case: the latest-started `fewest` jobs explain it (best by every measure).
    latest = range(len(live) - 1, len(live) - 1 - fewest, -1)
    ended_gpus = sum(live[p].gpus for p in latest)
    starts = jobs - len(live) + fewest
    if _start_gap(size_class, starts, wanted + ended_gpus) == 0:
        return _Plan(tuple(latest), _split(size_class, starts, wanted + ended_gpus))
    possible = _start_gap(size_class, jobs, gpus) == 0
    bound = extra_ends
    while True:
        most = min(len(live), fewest + bound)
        gap, plan = _search(live, jobs, wanted, size_class, fewest, most)
        if gap == 0 or not possible or most == len(live):
            return plan
        bound = max(1, 4 * bound)


def _search(
    live: list[_Live], jobs: int, wanted: int, size_class: SizeClass, fewest: int, most: int
) -> tuple[int, _Plan]:
    """The best plan ending ``fewest`` to ``most`` jobs, and the GPUs it leaves unexplained:
    the ends only matter through their total GPUs, so the search is over how many jobs of
    each live size end (within a size, the latest started), which stays small however many
    jobs are live."""
    ranks = _ranks_by_size(live, most)
    best: tuple[int, int, int, tuple[int, ...]] | None = None
    for (count, total), (rank_sum, chosen) in _end_choices(ranks, most).items():
        if count < fewest:
            continue
        gap = _start_gap(size_class, jobs - len(live) + count, wanted + total)
        key = (gap, count, rank_sum, chosen)
        if best is None or key < best:
            best = key
    assert best is not None  # ending `fewest` jobs is always a choice
    gap, count, _, chosen = best
    ends = sorted(
        (
            len(live) - 1 - rank
            for (_, size_ranks), n in zip(sorted(ranks.items()), chosen, strict=True)
            for rank in size_ranks[:n]
        ),
        reverse=True,
    )
    starts = jobs - len(live) + count
    start_gpus = _clamp(size_class, starts, wanted + sum(live[p].gpus for p in ends))
    return gap, _Plan(tuple(ends), _split(size_class, starts, start_gpus))


def _ranks_by_size(live: list[_Live], most: int) -> dict[int, list[int]]:
    """For each size of live job, the LIFO ranks (0: the latest started) of its ``most``
    latest-started jobs: only those can be among ``most`` ends chosen latest first."""
    ranks: dict[int, list[int]] = {}
    for rank in range(len(live)):
        size_ranks = ranks.setdefault(live[len(live) - 1 - rank].gpus, [])
        if len(size_ranks) < most:
            size_ranks.append(rank)
    return ranks


def _end_choices(
    ranks: dict[int, list[int]], most: int
) -> dict[tuple[int, int], tuple[int, tuple[int, ...]]]:
    """Every (number of ends <= ``most``, their total GPUs) reachable by ending the latest
    started jobs of each size, with the choice (jobs ended per size, sizes ascending) that does
    it with the smallest sum of LIFO ranks: the most recent jobs end first."""
    states: dict[tuple[int, int], tuple[int, tuple[int, ...]]] = {(0, 0): (0, ())}
    for size, size_ranks in sorted(ranks.items()):
        prefix = [0]
        for rank in size_ranks:
            prefix.append(prefix[-1] + rank)
        grown: dict[tuple[int, int], tuple[int, tuple[int, ...]]] = {}
        for (count, total), (rank_sum, chosen) in states.items():
            for n in range(min(len(size_ranks), most - count) + 1):
                key = (count + n, total + n * size)
                value = (rank_sum + prefix[n], (*chosen, n))
                old = grown.get(key)
                if old is None or value < old:
                    grown[key] = value
        states = grown
    return states


def _clamp(size_class: SizeClass, starts: int, start_gpus: int) -> int:
    """The GPUs nearest ``start_gpus`` that ``starts`` jobs of the class can hold."""
    if starts == 0:
        return 0
    start_gpus = max(start_gpus, starts * size_class.min_gpus)
    if size_class.max_gpus is not None:
        start_gpus = min(start_gpus, starts * size_class.max_gpus)
    return start_gpus


def _split(size_class: SizeClass, starts: int, start_gpus: int) -> tuple[int, ...]:
    """``start_gpus`` GPUs over ``starts`` new jobs, largest first: in whole multiples of the
    class's ``multiple`` (nodes) as evenly as they go, else as evenly as GPUs go. Only the
    total is known, and even splits keep one large start from being invented out of many small
    ones. Largest first puts the smallest last, so that LIFO ends it first among them."""
    if starts == 0:
        return ()
    unit = size_class.multiple
    if start_gpus % unit == 0:
        sizes = _even(start_gpus // unit, starts, unit)
        if all(_fits(size_class, size) for size in sizes):
            return sizes
    return _even(start_gpus, starts, 1)


def _even(units: int, parts: int, unit: int) -> tuple[int, ...]:
    each, more = divmod(units, parts)
    return (unit * (each + 1),) * more + (unit * each,) * (parts - more)


def _fits(size_class: SizeClass, size: int) -> bool:
    return size >= size_class.min_gpus and (
        size_class.max_gpus is None or size <= size_class.max_gpus
    )


def running_counts(jobs: Sequence[RebuiltJob], minutes: Sequence[int]) -> list[tuple[int, int]]:
    """(running jobs, running GPUs) of ``jobs`` at each of ``minutes`` (increasing): the
    counts a reconstruction is checked against. A job runs at minute ``m`` when ``start <= m``
    and ``m < end``."""
    job_delta = [0] * (len(minutes) + 1)
    gpu_delta = [0] * (len(minutes) + 1)
    for job in jobs:
        first = bisect_left(minutes, job.start)
        last = len(minutes) if job.end is None else bisect_left(minutes, job.end)
        job_delta[first] += 1
        job_delta[last] -= 1
        gpu_delta[first] += job.gpus
        gpu_delta[last] -= job.gpus
    counts: list[tuple[int, int]] = []
    running_jobs = running_gpus = 0
    for index in range(len(minutes)):
        running_jobs += job_delta[index]
        running_gpus += gpu_delta[index]
        counts.append((running_jobs, running_gpus))
    return counts
