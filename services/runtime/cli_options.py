"""Options and checks every ``fairshare`` service command shares (the main CLI and the
sub-apps of the agents and the API), so that ``--kafka`` means the same everywhere.

The consoles and the data-dir default live here too, so that the commands each package
registers print and store alike. ``services.runtime`` imports ``services.brokers`` and
``services.bus`` (:func:`bootstrap_or_exit`), so a command module inside those two packages
cannot use this one without an import cycle between packages.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

if TYPE_CHECKING:  # annotations only: a client command must not load the events package
    from events import Topics

KafkaOption = Annotated[
    str | None,
    typer.Option(
        "--kafka",
        envvar="FAIRSHARE_KAFKA_BOOTSTRAP",
        help="bootstrap servers of the Kafka to use",
    ),
]


def _use_kafka_config(path: Path | None) -> Path | None:
    """Applied as the command line is read, before any client exists: every Kafka client of
    the process (and of the children it starts) then connects as the file says
    (``services.bus.connection``); a missing or unreadable file stops the command (exit 2)."""
    if path is not None:
        from services.bus.connection import KafkaConfigError, use_config_file

        try:
            use_config_file(path)
        except KafkaConfigError as error:
            raise typer.BadParameter(str(error)) from error
    return path


KafkaConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--kafka-config",
        envvar="FAIRSHARE_KAFKA_CONFIG",
        callback=_use_kafka_config,
        help="librdkafka properties of a secured Kafka (security.protocol, sasl.mechanism, "
        "sasl.username, sasl.password, ssl.ca.location, ...): who this service is on the log",
    ),
]
PrefixOption = Annotated[
    str, typer.Option("--topic-prefix", envvar="FAIRSHARE_TOPIC_PREFIX", help="topic name prefix")
]

CheckpointEveryOption = Annotated[
    float,
    typer.Option(
        "--checkpoint-every-s",
        envvar="FAIRSHARE_CHECKPOINT_EVERY_S",
        min=0.0,
        help="checkpoint the fold this often, so a restart reads only the log's tail "
        "(0: never; every start folds from the first offset)",
    ),
]

#: ``/metrics`` of a service without an HTTP server of its own (``services.metrics.endpoint``).
MetricsPortOption = Annotated[
    int,
    typer.Option(
        "--metrics-port",
        envvar="FAIRSHARE_METRICS_PORT",
        min=0,
        max=65535,
        help="serve Prometheus metrics on this port at /metrics (0: off)",
    ),
]
MetricsHostOption = Annotated[
    str,
    typer.Option(
        "--metrics-host",
        envvar="FAIRSHARE_METRICS_HOST",
        help="interface of the metrics port (0.0.0.0 for a Prometheus on another host)",
    ),
]

#: Where local state goes by default (broker data, the SQLite file, logs).
DEFAULT_DATA_DIR = Path(os.environ.get("FAIRSHARE_DATA_DIR", ".fairshare"))

#: Where a local ``fairshare up`` keeps its broker: read when neither --events nor --kafka is
#: given (the same option and variable as ``up``'s).
DataDirOption = Annotated[
    Path,
    typer.Option(
        "--data-dir",
        envvar="FAIRSHARE_DATA_DIR",
        help="without --events or --kafka: the log of the `fairshare up` kept here, read as "
        "its audit principal",
    ),
]

#: Lines are never folded by Rich: off a terminal (a pipe, a log file) a banner folded at 80
#: columns broke paths and URLs mid-word; a terminal wraps what is too long by itself.
console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)


def bootstrap_or_exit(kafka: str | None, topics: Topics) -> str:
    """The broker's address, with Fairshare's topics created (a consumer subscribed to a topic
    that does not exist yet would not see it for minutes); exit 2 with the reason otherwise."""
    from services.brokers import BrokerStartError, external_broker
    from services.bus.admin import TopicSetupError, ensure_topics

    try:
        bootstrap = external_broker(kafka).bootstrap
        ensure_topics(bootstrap, topics)
    except (BrokerStartError, TopicSetupError) as error:
        err_console.print(f"[red]no broker:[/] {error}")
        raise typer.Exit(2) from error
    return bootstrap
