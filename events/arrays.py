"""Job arrays' index expressions, as ``sbatch --array`` writes them: the one parser and the one
printer every surface (the event model, the API, the CLI) goes through.

An expression is a comma-separated list of items, each an index (``7``), a range (``0-999``)
or a stepped range (``0-99:2``); ``%K`` after the list, in the CLI's ``--array`` only, is the
throttle (at most K elements running at once). The log keeps the expression, never the list:
10,000 indices cost four characters (``0-9999``), so an array's one fact stays small whatever
its size.

Parsing is bounded before it is done, because the API parses what any caller sends on a
machine the scheduler shares: at most :data:`MAX_ARRAY_ELEMENTS` indices counting repeats
(``0-99999,0-99999`` is refused: each item is materialised), none above
:data:`MAX_ARRAY_INDEX` (element ids stay within the id length), and at most
:data:`MAX_EXPRESSION_CHARS` characters.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

#: The largest index an element may have (Slurm's default ``MaxArraySize`` is 1001; its
#: largest is 4,000,001): seven digits, so ``<array id>_<index>`` stays a valid id.
MAX_ARRAY_INDEX = 9_999_999
#: How many elements one array may have (indices counted with repeats while parsing).
MAX_ARRAY_ELEMENTS = 100_000
#: The longest expression accepted: a list of some thousands of indices (resubmitting the
#: failed elements of an earlier array), far below the log's record size.
MAX_EXPRESSION_CHARS = 32_768
#: Room an element id needs beyond its array's id: ``_`` and the index's digits.
ELEMENT_SUFFIX_CHARS = 1 + len(str(MAX_ARRAY_INDEX))

_ITEM = re.compile(r"^(\d{1,9})(?:-(\d{1,9})(?::(\d{1,9}))?)?$")


class ArraySpecError(ValueError):
    """An expression that names no valid set of indices; the message says which item."""


def parse_indices(text: str) -> tuple[int, ...]:
    """The indices ``text`` names, ascending and each once (``"5,1-3"`` -> ``(1, 2, 3, 5)``).

    Cached: every reader of an array's fact expands it, and a fold sees the same expression
    again on every retry of a held fact."""
    return _parse(text)


@lru_cache(maxsize=256)
def _parse(text: str) -> tuple[int, ...]:
    if not text:
        raise ArraySpecError("an array needs at least one index (e.g. 0-9)")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ArraySpecError(f"the index expression is over {MAX_EXPRESSION_CHARS} characters")
    if "%" in text:
        raise ArraySpecError("the indices take no %K: the throttle is max_running of its own")
    found: set[int] = set()
    named = 0
    for item in text.split(","):
        items = _item(item)
        named += len(items)
        if named > MAX_ARRAY_ELEMENTS:
            raise ArraySpecError(
                f"an array may have at most {MAX_ARRAY_ELEMENTS} elements "
                f"(indices counted with repeats); {text[:40]!r}... names more"
            )
        found.update(items)
    return tuple(sorted(found))


def _item(item: str) -> range:
    match = _ITEM.match(item)
    if match is None:
        raise ArraySpecError(
            f"{item!r} is not an index, a range (0-99) or a stepped range (0-99:2)"
        )
    first = int(match.group(1))
    last = first if match.group(2) is None else int(match.group(2))
    step = 1 if match.group(3) is None else int(match.group(3))
    if last > MAX_ARRAY_INDEX:
        raise ArraySpecError(f"{item!r}: indices go up to {MAX_ARRAY_INDEX}")
    if last < first:
        raise ArraySpecError(f"{item!r}: a range goes up (write {last}-{first})")
    if step < 1:
        raise ArraySpecError(f"{item!r}: a step is at least 1")
    return range(first, last + 1, step)


def format_indices(indices: Iterable[int]) -> str:
    """The canonical expression of ``indices``: ascending, runs of step 1 as ``a-b``, other
    runs of three or more at one step as ``a-b:s``, the rest listed. Equal sets print equal,
    so two requests for one array compare by their expressions."""
    values = sorted(set(indices))
    if not values:
        raise ArraySpecError("an array needs at least one index (e.g. 0-9)")
    parts: list[str] = []
    i = 0
    while i < len(values):
        end = _run_end(values, i, 1)
        if end > i:
            parts.append(f"{values[i]}-{values[end]}")
        else:
            step = values[i + 1] - values[i] if i + 1 < len(values) else 0
            end = _run_end(values, i, step) if step else i
            if end >= i + 2:
                parts.append(f"{values[i]}-{values[end]}:{step}")
            else:
                end = i
                parts.append(str(values[i]))
        i = end + 1
    return ",".join(parts)


def _run_end(values: list[int], start: int, step: int) -> int:
    """The last position of the run from ``start`` whose values go up by ``step``; a run of a
    larger step stops before a value that starts a run of step 1 (``1,3,5-7``, not
    ``1-5:2,6-7``)."""
    end = start
    while end + 1 < len(values) and values[end + 1] - values[end] == step:
        if step > 1 and end + 2 < len(values) and values[end + 2] - values[end + 1] == 1:
            break
        end += 1
    return end


def canonical(text: str) -> str:
    """``text`` in canonical form (:func:`format_indices` of what it names)."""
    return format_indices(parse_indices(text))


def parse_array(text: str) -> tuple[str, int | None]:
    """``--array``'s value, ``0-999%50``: the canonical expression and the throttle (None
    without ``%``)."""
    expression, throttle, limit = text.partition("%")
    if not throttle:
        return canonical(expression), None
    if not limit.isdigit() or int(limit) < 1:
        raise ArraySpecError(f"%{limit}: the throttle is a whole number of elements, at least 1")
    return canonical(expression), min(int(limit), MAX_ARRAY_ELEMENTS)


def element_id(array_id: str, index: int) -> str:
    """An element's workload id, as Slurm shows an array task: ``<array id>_<index>``."""
    return f"{array_id}_{index}"
