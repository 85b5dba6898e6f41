"""Options and checks every ``fairshare`` service command shares (the main CLI and the
sub-apps of the agents and the API), so that ``--kafka`` means the same everywhere."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from events import Topics

KafkaOption = Annotated[
    str | None,
    typer.Option(
        "--kafka",
        envvar="FAIRSHARE_KAFKA_BOOTSTRAP",
        help="bootstrap servers of the Kafka to use",
    ),
]
PrefixOption = Annotated[
    str, typer.Option("--topic-prefix", envvar="FAIRSHARE_TOPIC_PREFIX", help="topic name prefix")
]

_errors = Console(stderr=True, soft_wrap=True)


def bootstrap_or_exit(kafka: str | None, topics: Topics) -> str:
    """The broker's address, with Fairshare's topics created (a consumer subscribed to a topic
    that does not exist yet would not see it for minutes); exit 2 with the reason otherwise."""
    from services.brokers import BrokerStartError, external_broker
    from services.bus.admin import TopicSetupError, ensure_topics

    try:
        bootstrap = external_broker(kafka).bootstrap
        ensure_topics(bootstrap, topics)
    except (BrokerStartError, TopicSetupError) as error:
        _errors.print(f"[red]no broker:[/] {error}")
        raise typer.Exit(2) from error
    return bootstrap
