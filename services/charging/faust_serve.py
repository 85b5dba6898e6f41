"""The charging fold served by faust-streaming (pinned 0.15.3; ``concurrency=1``; web server
off; at-least-once).

faust only transports here: each record is decoded by our serde and handed to
:class:`services.charging.host.ChargingHost`, the same fold the plain consumers
(``services.charging.serve``) run, so the charges are identical whichever serves it. Billable
numbers never come from faust's windowed tables (they expire by wall clock): the fold's hour
buckets are event time. The fold is rebuilt on every start by reading its input from the first
offset (a fresh consumer group per start), and charges already on the ledger topic are never
published again. This worker keeps no checkpoint (faust owns the consumer's positions): the
plain consumers do, and are the default. Every record is judged as the plain consumers judge
it (``services.bus.trust``): what is forged or signed by the wrong key is skipped (the plain
consumers dead-letter it, once), never charged.

Run it with ``fairshare charging --host faust`` (or ``python -m services.charging.faust_serve``),
with ``FAIRSHARE_KAFKA_BOOTSTRAP`` and ``FAIRSHARE_TOPIC_PREFIX`` set.
"""

from __future__ import annotations

import logging
import os
import ssl
import tempfile
import time
from collections.abc import Mapping
from typing import Any

import faust

from events import TopicKind, Topics
from services.bus.connection import security_settings
from services.bus.records import RawRecord, Rejected, check, skip
from services.bus.trust import KeysFromLog, kafka_keys, not_believed
from services.charging.host import ChargingHost
from services.charging.serve import kafka_charging_fold
from services.metrics.trust import watch_refusals

log = logging.getLogger(__name__)


def broker_credentials(settings: Mapping[str, str]) -> Any:
    """faust's (aiokafka's) credentials from the librdkafka settings every other client of
    the process uses (``services.bus.connection``), so ``--kafka-config`` means one principal
    whichever serves charging: SASL (SCRAM, PLAIN) over TLS or not, or TLS alone (mTLS when a
    client certificate is named). None for a plain Kafka."""
    protocol = settings.get("security.protocol", "PLAINTEXT").upper()
    if protocol == "PLAINTEXT":
        return None
    context = None
    if protocol in ("SSL", "SASL_SSL"):
        context = ssl.create_default_context(cafile=settings.get("ssl.ca.location"))
        if "ssl.certificate.location" in settings:
            context.load_cert_chain(
                settings["ssl.certificate.location"],
                settings.get("ssl.key.location"),
                settings.get("ssl.key.password"),
            )
    if protocol == "SSL":
        return faust.SSLCredentials(context)
    return faust.SASLCredentials(
        username=settings.get("sasl.username"),
        password=settings.get("sasl.password"),
        ssl_context=context,
        mechanism=settings.get("sasl.mechanism", "PLAIN").upper(),
    )


def build_app(bootstrap: str, topics: Topics) -> tuple[faust.App, ChargingHost]:
    host = kafka_charging_fold(bootstrap, topics, snapshot_every_s=30)
    # the one judgement of signed facts every reader makes (services.bus.trust): a forged or
    # wrongly signed fact is never charged here either
    trust = KeysFromLog(kafka_keys(bootstrap, topics))
    watch_refusals("charging", lambda: trust.trust.refused)
    app = faust.App(
        f"fairshare-charging-{time.time_ns()}",  # a fresh group: the fold replays from 0
        broker=f"kafka://{bootstrap}",
        broker_credentials=broker_credentials(security_settings()),
        web_enabled=False,
        consumer_auto_offset_reset="earliest",
        topic_allow_declare=False,
        topic_disable_leader=True,
        store="memory://",
        # faust writes a data directory even for in-memory tables; nothing in it is kept
        # between runs (the fold replays from 0), so it goes to a temporary directory instead
        # of the working directory.
        datadir=tempfile.mkdtemp(prefix="fairshare-faust-"),
    )
    source = app.topic(
        topics.name(TopicKind.WORKLOADS),
        topics.name(TopicKind.HEARTBEATS),
        value_serializer="raw",
        key_serializer="raw",
    )

    @app.agent(source, concurrency=1)
    async def charge(stream: Any) -> Any:
        async for event in stream.events():
            message = event.message
            headers = [
                (k, v)
                for k, v in (
                    message.headers.items()
                    if isinstance(message.headers, dict)
                    else message.headers
                )
            ]
            record = RawRecord(
                topic=message.topic,
                partition=message.partition,
                offset=message.offset,
                key=message.key,
                value=event.value,
                headers=headers,
            )
            checked = check(record, topics)
            if not isinstance(checked, Rejected):
                verdict = trust.judge(checked.envelope)
                if verdict is not None:
                    checked = not_believed(record, verdict)
            if isinstance(checked, Rejected):
                # the plain consumers dead-letter it (once each); here it is skipped, never charged
                skip(checked, "charging-faust")
                continue
            host.handle(checked)
            host.publisher.flush()
            host.snapshot_if_due()
            yield checked.envelope.id

    return app, host


def main() -> None:
    bootstrap = os.environ["FAIRSHARE_KAFKA_BOOTSTRAP"]
    topics = Topics(prefix=os.environ.get("FAIRSHARE_TOPIC_PREFIX", "fairshare."))
    app, host = build_app(bootstrap, topics)
    host.restore()  # before the agent runs: charges already published are never sent again
    worker = faust.Worker(app, loglevel="WARNING")
    worker.execute_from_commandline()


if __name__ == "__main__":
    main()
