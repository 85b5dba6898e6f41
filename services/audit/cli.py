"""``fairshare audit replay | verify | explain`` and ``fairshare events export``: the audit
and the file it can work from.

The export is here rather than beside ``services.bus.export`` because the command shares the
``--kafka`` option of ``services.runtime``, which imports ``services.bus``: a command module in
the bus would close an import cycle between packages.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

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

audit_app = typer.Typer(no_args_is_help=True, help="Replay, verify and explain the event log.")
events_app = typer.Typer(no_args_is_help=True, help="Export the event log.")

EventsOption = Annotated[
    Path | None, typer.Option("--events", help="an exported event log (one envelope per line)")
]


def _log(
    events: Path | None,
    kafka: str | None,
    topic_prefix: str,
    strict: bool = True,
    data_dir: Path = DEFAULT_DATA_DIR,
) -> Iterable[Any]:
    """The whole log, from a file or (with --kafka, or a local ``fairshare up``'s data dir)
    from the live topics; ``strict=False`` decodes an export file's hot types leanly
    (``services.audit.sources``)."""
    from services.audit.local_log import NO_LOG, local_or_given
    from services.audit.sources import log_from_file, log_from_kafka

    if events is None:
        kafka = local_or_given(kafka, data_dir)
    if events is not None:
        if not events.is_file():
            err_console.print(f"[red]--events:[/] {events} is not a file")
            raise typer.Exit(2)
        return log_from_file(events, strict)
    if kafka:
        from events import Topics
        from events.ndjson import BadLine

        # The live topics are always read strictly: they may hold records a consumer
        # dead-lettered, which must be bad lines here exactly as there. An export holds only
        # records that passed that strict check on their way out (services.bus.export).
        log = list(log_from_kafka(kafka, Topics(prefix=topic_prefix)))
        invalid = [item for item in log if isinstance(item, BadLine)]
        if invalid:
            # Records that never were events: consumers dead-lettered them; they are no facts.
            err_console.print(
                f"{len(invalid)} invalid record(s) on the topics skipped (they are in the "
                f"dead-letter topic), first: {invalid[0].reason}"
            )
        return [item for item in log if not isinstance(item, BadLine)]
    err_console.print(NO_LOG.format(data_dir=data_dir))
    raise typer.Exit(2)


@audit_app.command("replay")
def audit_replay(
    events: EventsOption = None,
    kafka: KafkaOption = None,
    kafka_config: KafkaConfigOption = None,
    topic_prefix: PrefixOption = "fairshare.",
    data_dir: DataDirOption = DEFAULT_DATA_DIR,
    database_url: Annotated[
        str | None,
        typer.Option(help="compare with the ledger stored in these read models instead"),
    ] = None,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="check every rule of every event of an --events export (default: its "
            "heartbeats and charges skip the cross-field rules checked when it was exported, "
            "none of which can change a charge); the live topics are always read strictly",
        ),
    ] = False,
    read_order: Annotated[
        bool,
        typer.Option(
            "--read-order",
            help="fold the facts in the order read instead of the canonical order of the spec "
            "(docs/spec/log-v1.md 8.9): shows whether the order a log holds changes its entries",
        ),
    ] = False,
    shuffle: Annotated[
        int | None,
        typer.Option(
            help="read the records in an order shuffled with this seed (each workload's "
            "recorded charges kept in their order, as their one partition keeps them), as "
            "another reader might meet them: the canonical order makes it change nothing",
        ),
    ] = None,
    period: Annotated[
        str | None,
        typer.Option(
            help="audit one closed period only (2026-11, 2026-11-05 or 2026-11-05T13; needs "
            "--kafka): re-derived from where it opened and its own facts, its seal and its "
            "chain to the previous seal checked",
        ),
    ] = None,
    workers: Annotated[
        int,
        typer.Option(
            min=0,
            help="audit an --events export in this many processes, the log split by workload "
            "(0: one per usable core); the result is the one process's, to which it falls "
            "back, saying why, where a split could judge a record otherwise",
        ),
    ] = 1,
) -> None:
    """Recompute every charge from the facts and compare, entry by entry, with the charges
    recorded in the log (or stored in the read models, with --database-url; or one closed
    period's, with --period)."""
    from services.audit.replay import shuffled
    from services.audit.sources import audit_log

    if workers != 1 and (
        events is None or database_url or shuffle is not None or period is not None
    ):
        err_console.print(
            "[red]--workers[/] splits an --events file (not with --database-url, --shuffle "
            "or --period)"
        )
        raise typer.Exit(2)
    if period is not None:
        from services.audit.local_log import local_or_given

        _audit_period(period, local_or_given(kafka, data_dir), topic_prefix)
        return

    log: Iterable[Any] = _log(events, kafka, topic_prefix, strict, data_dir)
    if events is not None and workers != 1:
        from services.audit.parallel import replay_file, usable_cores

        split = replay_file(events, workers or usable_cores(), strict, log_order=read_order)
        if split.fell_back is not None:
            err_console.print(f"audited in one process instead: {split.fell_back}")
        result = split.result
    else:
        if shuffle is not None:
            log = shuffled(log, shuffle)
        result = audit_log(log, database_url, log_order=read_order)
    for bad in result.bad_lines:
        err_console.print(f"[red]line {bad.line}:[/] {bad.reason}")
    for difference in result.differences:
        console.print(difference, highlight=False)
    where = "in the read models" if database_url else "in the log"
    console.print(
        f"{result.events} events, {result.recorded_count} charges {where}, "
        f"{result.recomputed_count} recomputed from the facts"
    )
    if result.identical:
        console.print("identical")
        return
    raise typer.Exit(1)


def _audit_period(period: str, kafka: str | None, topic_prefix: str) -> None:
    from events import Topics
    from services.audit.period import audit_period
    from services.audit.period_report import report_lines

    if not kafka:
        err_console.print("[red]--period needs --kafka BOOTSTRAP[/] (the seals are on the log)")
        raise typer.Exit(2)
    try:
        result = audit_period(kafka, Topics(prefix=topic_prefix), period)
    except ValueError as error:
        err_console.print(f"[red]--period:[/] {error}")
        raise typer.Exit(2) from error
    for line in report_lines(result):
        console.print(line, highlight=False, soft_wrap=True)
    if not result.identical:
        raise typer.Exit(1)


from services.audit.decisions_cli import audit_decisions  # noqa: E402

#: ``fairshare audit decisions --events FILE``: every pass re-derived from the log.
audit_app.command("decisions")(audit_decisions)


@audit_app.command("verify")
def audit_verify(
    events: EventsOption = None,
    kafka: KafkaOption = None,
    kafka_config: KafkaConfigOption = None,
    topic_prefix: PrefixOption = "fairshare.",
    data_dir: DataDirOption = DEFAULT_DATA_DIR,
) -> None:
    """Check the ledger's invariants over the log."""
    from services.audit.verify import verify

    checked, problems = verify(_log(events, kafka, topic_prefix, data_dir=data_dir))
    for problem in problems:
        console.print(f"[red]violation:[/] {problem}", highlight=False)
    console.print(f"{checked} charges checked, {len(problems)} violation(s)")
    if problems:
        raise typer.Exit(1)


@audit_app.command("explain")
def audit_explain(
    workload: Annotated[str, typer.Argument(help="the workload id")],
    events: EventsOption = None,
    kafka: KafkaOption = None,
    kafka_config: KafkaConfigOption = None,
    topic_prefix: PrefixOption = "fairshare.",
    data_dir: DataDirOption = DEFAULT_DATA_DIR,
    as_json: Annotated[
        bool, typer.Option("--json", help="the chain as JSON: each event's payload too")
    ] = False,
) -> None:
    """The causal chain of one workload, in time order: submission, decisions, runs, charges,
    end, one sentence each."""
    from services.audit.explain import explain, explain_json

    if as_json:
        import orjson

        document = explain_json(_log(events, kafka, topic_prefix, data_dir=data_dir), workload)
        sys.stdout.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    for line in explain(_log(events, kafka, topic_prefix, data_dir=data_dir), workload):
        console.print(line, highlight=False, soft_wrap=True)


@events_app.command("export")
def events_export(
    out: Annotated[Path, typer.Option(help="file to write (one envelope per line)")],
    kafka: KafkaOption = None,
    kafka_config: KafkaConfigOption = None,
    topic_prefix: PrefixOption = "fairshare.",
    data_dir: DataDirOption = DEFAULT_DATA_DIR,
) -> None:
    """Copy every event from Kafka (up to its current end) into a file an auditor can take.
    Without --kafka: the Kafka of the `fairshare up` in --data-dir, as its audit principal."""
    from events import Topics
    from services.audit.local_log import local_or_given
    from services.brokers import BrokerStartError, external_broker
    from services.bus.export import export_events

    try:
        broker = external_broker(local_or_given(kafka, data_dir))
    except BrokerStartError as error:
        err_console.print(f"[red]no broker:[/] {error}")
        raise typer.Exit(2) from error
    result = export_events(broker.bootstrap, out, Topics(prefix=topic_prefix))
    console.print(
        f"{result.events} events from {result.partitions} partition(s) written to {out}"
        + (
            f"; {result.skipped} invalid record(s) skipped (see the dead-letter topic)"
            if result.skipped
            else ""
        )
    )
