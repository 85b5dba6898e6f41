"""``fairshare audit decisions --events FILE``: the command body (registered by
``services.audit.cli``, which keeps the audit's commands in one Typer app)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from services.runtime.cli_options import (
    DEFAULT_DATA_DIR,
    DataDirOption,
    KafkaConfigOption,
    KafkaOption,
    PrefixOption,
    console,
    err_console,
)

if TYPE_CHECKING:
    from services.audit.decisions import DecisionAudit


def audit_decisions(
    events: Annotated[
        Path | None,
        typer.Option("--events", help="an event log written in decision order (a simulator's)"),
    ] = None,
    kafka: KafkaOption = None,
    kafka_config: KafkaConfigOption = None,
    topic_prefix: PrefixOption = "fairshare.",
    data_dir: DataDirOption = DEFAULT_DATA_DIR,
) -> None:
    """Re-derive every scheduling pass from the log and check its commands and the
    preemption rules; exit 1 naming the rule broken. ``--events``: a simulator's log
    (``fairshare simulate --events-out``), in decision order; ``--kafka``: the live topics,
    each pass cut at the input position its records name."""
    result = _audit(events, kafka, topic_prefix, data_dir)
    for bad in result.bad_lines:
        err_console.print(f"[red]line {bad.line}:[/] {bad.reason}")
    for problem in result.problems:
        console.print(f"[red]violation:[/] {problem}", highlight=False, soft_wrap=True)
    cut = getattr(result, "cut_short", 0)
    console.print(
        f"{result.passes} passes re-derived ({result.commands} commands, "
        f"{result.preemptions} preemptions) from {result.events} events: "
        f"{len(result.problems)} violation(s)"
        + (f"; {cut} pass(es) cut short by their leader's death" if cut else ""),
        highlight=False,
        soft_wrap=True,
    )
    if not result.ok:
        raise typer.Exit(1)


def _audit(
    events: Path | None, kafka: str | None, topic_prefix: str, data_dir: Path
) -> DecisionAudit:
    from services.audit.decisions import audit_decisions
    from services.audit.decisions_live import audit_live_decisions
    from services.audit.local_log import NO_LOG, local_or_given
    from services.audit.sources import deliveries_from_kafka, log_from_file

    if events is not None and kafka is not None:
        err_console.print("[red]give --events FILE or --kafka BOOTSTRAP[/] (one of them)")
        raise typer.Exit(2)
    if events is None:
        kafka = local_or_given(kafka, data_dir)
        if kafka is None:
            err_console.print(NO_LOG.format(data_dir=data_dir))
            raise typer.Exit(2)
    if events is not None:
        if not events.is_file():
            err_console.print(f"[red]--events:[/] {events} is not a file")
            raise typer.Exit(2)
        return audit_decisions(log_from_file(events))
    from events import Topics

    deliveries, invalid = deliveries_from_kafka(str(kafka), Topics(prefix=topic_prefix))
    if invalid:
        err_console.print(f"{invalid} invalid record(s) on the topics skipped (dead-lettered)")
    return audit_live_decisions(deliveries)
