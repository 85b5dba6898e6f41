"""The load's progress on a terminal: two bars, pods created and pods bound, out of the pods
the Jobs will make."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)


@contextmanager
def load_progress(console: Console) -> Iterator[Callable[[int, int, int], None]]:
    """A callback ``(created, bound, expected)`` drawing the bars on ``console``; the bars
    appear with the load's first call (the set-up before it prints its own lines)."""
    with Progress(
        TextColumn("{task.description:>13}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as bars:
        tasks: dict[str, TaskID] = {}

        def update(created: int, bound: int, expected: int) -> None:
            if not tasks:
                tasks["created"] = bars.add_task("pods created", total=expected)
                tasks["bound"] = bars.add_task("pods bound", total=expected)
            bars.update(tasks["created"], completed=created, total=expected)
            bars.update(tasks["bound"], completed=bound, total=expected)

        yield update
