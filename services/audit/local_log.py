"""The log of a local ``fairshare up``, for the audit and export commands typed beside it.

``fairshare up``'s broker is secured with credentials it writes only into its data dir, and its
port is its own choice: without this every ``audit ... --kafka`` or ``events export`` against a
local stack needed both, from a file written nowhere in the docs."""

from __future__ import annotations

from pathlib import Path

from services.runtime.cli_options import err_console

#: What to pass when there is no log to read (``{data_dir}``: where none was found).
NO_LOG = (
    "[red]give --events FILE or --kafka BOOTSTRAP[/] (no `fairshare up` log in {data_dir}: "
    "pass --data-dir DIR for one kept elsewhere; a remote Kafka: --kafka BOOTSTRAP "
    "--kafka-config FILE, FILE the librdkafka properties of an auditor's principal)"
)


def local_or_given(kafka: str | None, data_dir: Path) -> str | None:
    """``--kafka`` if given; else the Kafka of the ``fairshare up`` kept in ``data_dir``,
    connected to as its audit principal (unless ``--kafka-config`` named another); else None.
    ``fairshare up``'s broker is secured with credentials it writes only into its data dir,
    so without this every audit of a local stack needed the path of a file written nowhere."""
    if kafka:
        return kafka
    from services.brokers.local import local_kafka
    from services.bus.connection import configured_file, use_config_file

    found = local_kafka(data_dir)
    if found is None:
        return None
    who = ""
    if found.client_config is not None and configured_file() is None:
        use_config_file(found.client_config)
        who = f", as its audit principal ({found.client_config})"
    err_console.print(f"reading the log of `fairshare up` in {data_dir}: {found.bootstrap}{who}")
    _answers_or_exit(found.bootstrap, data_dir)
    return found.bootstrap


#: How long the broker of a local ``fairshare up`` has to answer before the command gives up.
READY_TIMEOUT_S = 5.0


def _answers_or_exit(bootstrap: str, data_dir: Path) -> None:
    """One line and exit 1 when the local stack's broker does not answer (``fairshare up``
    stopped): an audit typed beside a stopped stack ended in a KafkaException traceback."""
    import typer

    from services.brokers.handle import BrokerStartError, wait_until_ready

    try:
        wait_until_ready(bootstrap, timeout_s=READY_TIMEOUT_S)
    except BrokerStartError:
        err_console.print(
            f"[red]the broker of `fairshare up` in {data_dir} does not answer at {bootstrap}[/]"
            " (is it running? start it with `fairshare up`, or give --events FILE)"
        )
        raise typer.Exit(1) from None
