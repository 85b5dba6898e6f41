"""Jobs rebuilt from per-minute running counts (services/simulator/reconstruct.py).

The promise a replay of the Helios Earth trace rests on: summed minute by minute, the rebuilt
jobs give back the input counts exactly whenever nothing is counted as unexplained, and
nothing is unexplained where the counts are possible for the size class. The property tests
check it against job sets drawn at random (the counts of real jobs are always possible) with a
counter written here, not the module's own; the examples pin the choices the rules make (the
latest-started job ends first, gangs split into whole nodes) and what impossible counts cost.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.simulator.reconstruct import (
    GANGS,
    SMALL,
    RebuiltJob,
    SizeClass,
    reconstruct,
    running_counts,
)

Job = tuple[int, int | None, int]  # start, end (None: still running), GPUs


def counts(jobs: list[Job], minutes: list[int]) -> list[tuple[int, int, int]]:
    """(minute, running jobs, running GPUs), counted job by job: the tests' own measure."""
    samples = []
    for minute in minutes:
        running = [g for s, e, g in jobs if s <= minute and (e is None or minute < e)]
        samples.append((minute, len(running), sum(running)))
    return samples


def as_tuples(jobs: tuple[RebuiltJob, ...]) -> list[Job]:
    return [(job.start, job.end, job.gpus) for job in jobs]


def rebuilt(samples: list[tuple[int, int, int]], size_class: SizeClass) -> list[Job]:
    result = reconstruct(samples, size_class)
    assert result.unexplained_gpu_minutes == 0
    assert result.inexact_minutes == 0
    return as_tuples(result.jobs)


# --- examples --------------------------------------------------------------------------------


def test_one_64_gpu_gang_is_one_job() -> None:
    samples = counts([(2, 7, 64)], list(range(10)))
    assert rebuilt(samples, GANGS) == [(2, 7, 64)]


def test_two_gangs_ending_in_one_minute_are_two_ends() -> None:
    truth: list[Job] = [(0, 5, 16), (2, 5, 32)]
    assert rebuilt(counts(truth, list(range(8))), GANGS) == truth


def test_a_start_and_an_end_of_other_sizes_in_one_minute_end_the_latest_started() -> None:
    # minute 3: the 16-GPU gang (started last) ends and a 32-GPU one starts; the 8-GPU gang
    # started first runs on. Ending the 8 instead (and starting a 24) would fit the counts
    # too: LIFO picks the latest started.
    truth: list[Job] = [(0, None, 8), (1, 3, 16), (3, None, 32)]
    assert rebuilt(counts(truth, list(range(6))), GANGS) == truth


def test_a_small_job_ending_as_another_size_starts() -> None:
    truth: list[Job] = [(0, None, 2), (1, 3, 1), (3, 6, 3)]
    assert rebuilt(counts(truth, list(range(8))), SMALL) == truth


def test_the_latest_started_of_equal_jobs_ends_first() -> None:
    samples = [(0, 1, 1), (1, 2, 2), (2, 3, 3), (3, 2, 2), (4, 2, 2)]
    assert rebuilt(samples, SMALL) == [(0, None, 1), (1, None, 1), (2, 3, 1)]


def test_of_the_ends_that_fit_the_latest_started_are_chosen() -> None:
    # minute 5: two jobs with 4 GPUs between them end; the two 2-GPU jobs (started first)
    # would fit as well as the 1- and the 3-GPU job (started later), which LIFO picks
    truth: list[Job] = [(0, None, 2), (1, None, 2), (2, 5, 1), (3, 5, 3), (4, None, 5)]
    assert rebuilt(counts(truth, list(range(7))), SMALL) == truth


def test_jobs_alive_at_the_first_minute_start_there_and_at_the_last_stay_open() -> None:
    samples = [(10, 2, 24), (11, 2, 24), (12, 1, 16), (13, 1, 16)]
    assert rebuilt(samples, GANGS) == [(10, None, 16), (10, 12, 8)]


def test_gangs_starting_together_get_whole_nodes_then_an_even_split() -> None:
    assert rebuilt([(0, 2, 48)], GANGS) == [(0, None, 24), (0, None, 24)]
    assert rebuilt([(0, 2, 40)], GANGS) == [(0, None, 24), (0, None, 16)]
    assert rebuilt([(0, 3, 26)], GANGS) == [(0, None, 9), (0, None, 9), (0, None, 8)]
    assert rebuilt([(0, 3, 10)], SMALL) == [(0, None, 4), (0, None, 3), (0, None, 3)]


def test_a_change_beyond_the_first_search_is_still_explained() -> None:
    # four 1-GPU jobs become four 7-GPU jobs: at least four ends, more than the first search
    # allows beyond the none that the job count forces
    samples = [(0, 4, 4), (1, 4, 28)]
    result = reconstruct(samples, SMALL, extra_ends=3)
    assert result.unexplained_gpu_minutes == 0
    assert as_tuples(result.jobs) == [(0, 1, 1)] * 4 + [(1, None, 7)] * 4


def test_a_gap_between_samples_counts_for_its_minutes() -> None:
    truth: list[Job] = [(0, 10, 8), (5, None, 16)]
    samples = counts(truth, [0, 5, 10, 20])
    assert rebuilt(samples, GANGS) == truth


def test_impossible_counts_are_counted_for_every_minute_they_hold() -> None:
    # one job of 1-7 GPUs cannot hold 9: 2 GPUs short at minute 0, held for 10 minutes
    result = reconstruct([(0, 1, 9), (10, 1, 1), (11, 1, 1)], SMALL)
    assert result.unexplained_gpu_minutes == 2 * 10
    assert result.inexact_minutes == 1
    assert as_tuples(result.jobs) == [(0, 10, 7), (10, None, 1)]
    # the last sample holds for one minute; GPUs with no job at all are unexplained too
    assert reconstruct([(0, 0, 0), (1, 0, 5)], GANGS).unexplained_gpu_minutes == 5


def test_impossible_counts_do_not_restart_every_live_job() -> None:
    samples = [(0, 10, 10), (1, 10, 80)]  # ten jobs of 1-7 GPUs hold at most 70
    result = reconstruct(samples, SMALL, extra_ends=2)
    assert result.unexplained_gpu_minutes == 80 - (8 * 1 + 2 * 7)
    assert sum(job.end == 1 for job in result.jobs) == 2


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="increase"):
        reconstruct([(1, 0, 0), (1, 0, 0)], SMALL)
    with pytest.raises(ValueError, match=">= 0"):
        reconstruct([(0, -1, 0)], SMALL)
    with pytest.raises(ValueError, match="max_gpus"):
        SizeClass(min_gpus=8, max_gpus=7)
    with pytest.raises(ValueError, match="min_gpus"):
        SizeClass(min_gpus=0)


def test_running_counts_counts_the_jobs_running_at_each_minute() -> None:
    jobs = (RebuiltJob(0, 3, 8), RebuiltJob(2, None, 16), RebuiltJob(4, 5, 1))
    assert running_counts(jobs, [0, 1, 2, 3, 4, 5]) == [
        (1, 8),
        (1, 8),
        (2, 24),
        (1, 16),
        (2, 17),
        (1, 16),
    ]


# --- properties ------------------------------------------------------------------------------

MINUTES = 30
CLASSES = (SMALL, GANGS, SizeClass(2, 5), SizeClass(4, None, multiple=4))


@st.composite
def job_sets(draw: st.DrawFn) -> tuple[SizeClass, list[Job]]:
    """A size class and up to 14 jobs of it over 30 minutes, some running past the end."""
    size_class = draw(st.sampled_from(CLASSES))
    largest = size_class.max_gpus or 80
    sizes = st.one_of(
        st.integers(size_class.min_gpus, largest),
        st.sampled_from(
            [g for g in (8, 16, 32, 64) if g >= size_class.min_gpus and g <= largest]
            or [size_class.min_gpus]
        ),
    )
    jobs: list[Job] = []
    for start, duration, gpus in draw(
        st.lists(
            st.tuples(st.integers(0, MINUTES - 1), st.integers(1, MINUTES), sizes), max_size=14
        )
    ):
        end = start + duration
        jobs.append((start, None if end >= MINUTES else end, gpus))
    return size_class, jobs


@settings(max_examples=300, deadline=None)
@given(job_sets(), st.sampled_from([0, 1, 3]))
def test_rebuilt_jobs_give_back_the_counts_of_real_jobs(
    drawn: tuple[SizeClass, list[Job]], extra_ends: int
) -> None:
    size_class, truth = drawn
    samples = counts(truth, list(range(MINUTES)))
    result = reconstruct(samples, size_class, extra_ends=extra_ends)
    assert result.unexplained_gpu_minutes == 0
    assert result.inexact_minutes == 0
    jobs = as_tuples(result.jobs)
    assert counts(jobs, list(range(MINUTES))) == samples
    assert running_counts(result.jobs, list(range(MINUTES))) == [s[1:] for s in samples]
    for start, end, gpus in jobs:
        assert end is None or end > start  # every job runs at least a minute
        assert gpus >= size_class.min_gpus
        assert size_class.max_gpus is None or gpus <= size_class.max_gpus
    assert [j[0] for j in jobs] == sorted(j[0] for j in jobs)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(CLASSES),
    st.lists(st.tuples(st.integers(0, 6), st.integers(0, 60)), min_size=1, max_size=20),
)
def test_any_counts_are_matched_or_the_miss_is_counted(
    size_class: SizeClass, drawn: list[tuple[int, int]]
) -> None:
    samples = [(minute, jobs, gpus) for minute, (jobs, gpus) in enumerate(drawn)]
    result = reconstruct(samples, size_class)
    got = running_counts(result.jobs, [m for m, _, _ in samples])
    assert [j for j, _ in got] == [j for _, j, _ in samples]  # job counts always match
    missed = sum(abs(g - s[2]) for (_, g), s in zip(got, samples, strict=True))
    assert result.unexplained_gpu_minutes == missed
    assert result.inexact_minutes == sum(g != s[2] for (_, g), s in zip(got, samples, strict=True))
