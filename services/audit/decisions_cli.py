"""``fairshare audit decisions --events FILE``: the command body (registered by
``services.audit.cli``, which keeps the audit's commands in one Typer app)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from services.runtime.cli_options import console, err_console


def audit_decisions(
    events: Annotated[
        Path, typer.Option("--events", help="an event log written in decision order")
    ],
) -> None:
    """Re-derive every scheduling pass from the log and check its commands and the
    preemption rules; exit 1 naming the rule broken."""
    from services.audit.decisions import audit_decisions as audit
    from services.audit.sources import log_from_file

    if not events.is_file():
        err_console.print(f"[red]--events:[/] {events} is not a file")
        raise typer.Exit(2)
    result = audit(log_from_file(events))
    for bad in result.bad_lines:
        err_console.print(f"[red]line {bad.line}:[/] {bad.reason}")
    for problem in result.problems:
        console.print(f"[red]violation:[/] {problem}", highlight=False, soft_wrap=True)
    console.print(
        f"{result.passes} passes re-derived ({result.commands} commands, "
        f"{result.preemptions} preemptions) from {result.events} events: "
        f"{len(result.problems)} violation(s)",
        highlight=False,
        soft_wrap=True,
    )
    if not result.ok:
        raise typer.Exit(1)
