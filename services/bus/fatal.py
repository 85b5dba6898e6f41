"""The fatal-error latch of every Kafka client: crash-only (see :mod:`services.bus.kafka`).

A client that librdkafka declares fatally broken never works again. Every Kafka client of the
bus passes :meth:`FatalLatch.on_error` as its ``error_cb``, and every Kafka reader consumes
through :meth:`FatalLatch.consume`, so a fatal error is raised as :class:`FatalBusError` on the
next call whoever reads: the subscriber, the followers, the lease, the one-shot readers. A
module of its own so that the readers that :mod:`services.bus.kafka` itself builds on (the
export's :func:`~services.bus.export.read_to_end`) can use it too.
"""

from __future__ import annotations

import logging

from confluent_kafka import Consumer, KafkaError, KafkaException, Message

log = logging.getLogger(__name__)

#: Error codes that end a client for good even when librdkafka does not flag them fatal.
_FENCED = frozenset(
    {
        KafkaError._FATAL,
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.FENCED_INSTANCE_ID,
        KafkaError.TRANSACTION_COORDINATOR_FENCED,
    }
)


class FatalBusError(RuntimeError):
    """The Kafka client cannot go on: the process must exit and be restarted.

    Deliberately not a :class:`PublishError`: loops that retry a failed publish (the scheduler
    rebuilds from the log, the agent publishes again) must not catch it and keep a dead client.
    """


def is_fatal(error: KafkaError) -> bool:
    return bool(error.fatal()) or error.code() in _FENCED


class FatalLatch:
    """The first fatal error a client reported. librdkafka reports it through ``error_cb``
    inside poll, flush or consume, where raising would be lost in C; the client raises it on
    its next call instead (:meth:`check`). Pass :meth:`on_error` as ``error_cb`` to any raw
    confluent-kafka client to get the same behaviour."""

    def __init__(self, client: str) -> None:
        self.client = client
        self.error: str | None = None

    def on_error(self, error: KafkaError) -> None:
        if not is_fatal(error):
            # transient (a broker down, a timed-out request): librdkafka retries by itself
            log.warning("kafka client error", extra={"client": self.client, "error": str(error)})
            return
        if self.error is None:
            self.error = f"{error.name()}: {error.str()}"
            extra = {"client": self.client, "error": self.error}
            log.error("fatal kafka client error", extra=extra)

    def check(self) -> None:
        if self.error is not None:
            raise FatalBusError(f"{self.client}: {self.error}")

    def consume(self, consumer: Consumer, max_records: int, timeout_s: float) -> list[Message]:
        """``consumer.consume``, raising a fatal error whether the call, the client's error
        callback or one of the messages carries it; the messages without an error, in order
        (a transient error a message carries is logged and left out)."""
        self.check()
        try:
            messages = consumer.consume(num_messages=max_records, timeout=timeout_s)
        except KafkaException as failure:
            self.raise_if_fatal(failure)
            raise
        self.check()
        good: list[Message] = []
        for message in messages:
            error = message.error()
            if error is None:
                good.append(message)
            elif is_fatal(error):
                self.on_error(error)
                self.check()
            else:
                log.warning("consumer error", extra={"client": self.client, "error": str(error)})
        return good

    def raise_if_fatal(self, exception: KafkaException) -> None:
        """Raise FatalBusError if ``exception`` carries a fatal error (then it is latched)."""
        error = exception.args[0] if exception.args else None
        if isinstance(error, KafkaError) and is_fatal(error):
            self.on_error(error)
            self.check()
