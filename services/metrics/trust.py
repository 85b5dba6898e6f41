"""How many records each reader of this process did not believe (signed facts,
docs/signed-facts.md): forged, wrongly signed, or stated by a signer that may not state them.

The judgement is the pure core's (``projections.trust.Trust`` counts its refusals by kind);
this collector only reads those counts at scrape time, so the core stays free of
prometheus_client. A reader whose state is rebuilt (a scheduler that lost its lease folds the
log again) starts its count again: a counter reset, which ``rate()`` and ``increase()`` handle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

__all__ = ["watch_refusals"]

#: reader -> its refusals by kind, read at every scrape
_READERS: dict[str, Callable[[], Mapping[str, int]]] = {}


def watch_refusals(consumer: str, refused: Callable[[], Mapping[str, int]]) -> None:
    """Export ``refused()`` (refusals by kind) as this process's count for ``consumer``; a
    second call for the same consumer replaces the first (a rebuilt state)."""
    _READERS[consumer] = refused


class _NotBelieved(Collector):
    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "fairshare_records_not_believed",
            "Records this process's readers refused as signed facts: a bad or unknown "
            "signature, a signer that may not state the fact, or unsigned where its signer "
            "signs",
            labels=["consumer", "kind"],
        )
        for consumer, refused in sorted(_READERS.items()):
            for kind, count in sorted(refused().items()):
                family.add_metric([consumer, kind], count)
        yield family


REGISTRY.register(_NotBelieved())
