"""How far behind the log each reader of this process is: ``fairshare_consumer_lag_records``.

Every reader of the log (a follower, a group consumer, charging's ledger tail) registers itself
here when it opens and leaves when it closes; a scrape asks each for its lag per partition.
Readers answer from what their own thread last saw (positions handed out, the high watermark of
the last fetch), so a scrape never waits on the broker, and a reader that is stuck shows a lag
that grows instead of a scrape that hangs.

Per topic, the lag of the furthest-behind reader of that topic in the process: two readers of
one topic (seldom) are not added up, since each reads the whole of it.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Iterable, Iterator, Mapping
from typing import Protocol

from prometheus_client import REGISTRY
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from events.positions import TopicPartition

log = logging.getLogger(__name__)


class LagSource(Protocol):
    def lag(self) -> Mapping[TopicPartition, int]:
        """Records on the log not yet handed out, per partition; safe to call from any thread."""
        ...


_lock = threading.Lock()
# weak: a reader dropped without being closed still leaves
_sources: weakref.WeakSet[LagSource] = weakref.WeakSet()


def watch(source: LagSource) -> None:
    """Report ``source``'s lag from now on (until :func:`unwatch` or until it is dropped)."""
    with _lock:
        _sources.add(source)


def unwatch(source: LagSource) -> None:
    with _lock:
        _sources.discard(source)


def lag_by_topic(sources: Iterable[LagSource]) -> dict[str, int]:
    """Per topic, the largest of the sources' lags (each summed over its partitions). A source
    that cannot answer (closed under the scrape) is left out of this scrape."""
    by_topic: dict[str, int] = {}
    for source in sources:
        try:
            lag = dict(source.lag())
        except Exception as error:  # a reader closing meanwhile: its lag is unknown now
            log.debug("lag unknown for a reader: %s", error)
            continue
        totals: dict[str, int] = {}
        for (topic, _partition), behind in lag.items():
            totals[topic] = totals.get(topic, 0) + max(0, behind)
        for topic, total in totals.items():
            by_topic[topic] = max(by_topic.get(topic, 0), total)
    return by_topic


def current() -> dict[str, int]:
    """The lag per topic of this process's readers now (what a scrape reports)."""
    with _lock:
        sources = list(_sources)
    return lag_by_topic(sources)


class ConsumerLag(Collector):
    NAME = "fairshare_consumer_lag_records"
    HELP = (
        "Records on the log this process has not read yet, per topic (its furthest-behind reader)"
    )

    def __init__(self, sources: Iterable[LagSource] | None = None) -> None:
        """``sources``: fixed ones (tests); default, every reader registered by :func:`watch`."""
        self._fixed = None if sources is None else list(sources)

    def _sources(self) -> list[LagSource]:
        if self._fixed is not None:
            return self._fixed
        with _lock:
            return list(_sources)

    def describe(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(self.NAME, self.HELP, labels=["topic"])

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(self.NAME, self.HELP, labels=["topic"])
        for topic, behind in sorted(lag_by_topic(self._sources()).items()):
            family.add_metric([topic], behind)
        yield family


REGISTRY.register(ConsumerLag())
