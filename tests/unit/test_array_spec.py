"""The index expressions of job arrays (``sbatch --array``): one parser, one printer.

Properties: printing what an expression names and parsing it back gives the same indices; the
printed form is canonical (printing twice changes nothing), so equal sets compare equal as
text; the count is the number of distinct indices. And the bounds that keep the API's parsing
cheap on any input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events.arrays import (
    MAX_ARRAY_ELEMENTS,
    MAX_ARRAY_INDEX,
    MAX_EXPRESSION_CHARS,
    ArraySpecError,
    canonical,
    element_id,
    format_indices,
    parse_array,
    parse_indices,
)

indices = st.sets(st.integers(0, 5_000), min_size=1, max_size=400)
items = st.one_of(
    st.integers(0, 300).map(str),
    st.tuples(st.integers(0, 300), st.integers(0, 300)).map(lambda r: f"{min(r)}-{max(r)}"),
    st.tuples(st.integers(0, 300), st.integers(0, 300), st.integers(1, 40)).map(
        lambda r: f"{min(r[:2])}-{max(r[:2])}:{r[2]}"
    ),
)
expressions = st.lists(items, min_size=1, max_size=12).map(",".join)


@settings(max_examples=300, deadline=None)
@given(indices)
def test_parsing_the_printed_form_gives_the_indices_back(found: set[int]) -> None:
    assert parse_indices(format_indices(found)) == tuple(sorted(found))


@settings(max_examples=300, deadline=None)
@given(expressions)
def test_the_printed_form_is_canonical_and_counts_each_index_once(text: str) -> None:
    named = parse_indices(text)
    printed = format_indices(named)
    assert canonical(printed) == printed == canonical(text)
    assert len(named) == len(set(named))
    expected: set[int] = set()
    for item in text.split(","):
        bounds, _colon, step = item.partition(":")
        first, _dash, last = bounds.partition("-")
        expected.update(range(int(first), int(last or first) + 1, int(step or 1)))
    assert set(named) == expected
    assert len(printed) <= len(",".join(map(str, named)))  # never longer than the list


@pytest.mark.parametrize(
    ("text", "printed"),
    [
        ("0-999", "0-999"),
        ("0-99:2", "0-98:2"),
        ("1,3,5-7", "1,3,5-7"),
        ("5,1-3,3", "1-3,5"),
        ("7", "7"),
        ("0,2,4,5,6", "0,2,4-6"),
        ("1,3,5", "1-5:2"),
    ],
)
def test_slurm_expressions(text: str, printed: str) -> None:
    assert canonical(text) == printed


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "at least one index"),
        ("9-0", "a range goes up"),
        ("0-9:0", "a step is at least 1"),
        ("1,,2", "is not an index"),
        (" 1", "is not an index"),
        ("-1", "is not an index"),
        ("0-9%5", "max_running"),
        (f"0-{MAX_ARRAY_ELEMENTS}", f"at most {MAX_ARRAY_ELEMENTS} elements"),
        ("0-60000,0-60000", "counted with repeats"),
        (str(MAX_ARRAY_INDEX + 1), f"indices go up to {MAX_ARRAY_INDEX}"),
        ("1," * MAX_EXPRESSION_CHARS, "characters"),
    ],
)
def test_what_is_refused_and_why(text: str, needle: str) -> None:
    with pytest.raises(ArraySpecError, match=needle):
        parse_indices(text)


def test_the_throttle_of_the_cli_spelling() -> None:
    assert parse_array("0-999%50") == ("0-999", 50)
    assert parse_array("3,1") == ("1,3", None)
    for bad in ("0-9%0", "0-9%x", "0-9%"):
        with pytest.raises(ArraySpecError, match="throttle"):
            parse_array(bad)


def test_element_ids_are_as_slurm_shows_tasks() -> None:
    assert element_id("sweep", 7) == "sweep_7"
