"""Nodes sent for repair at random: the scenario that shows whether draining needs a human.

A fraction of the nodes per day is sent for repair, at times drawn from a seeded generator, so
every policy of one run faces the same requests and a rerun with the same seed is identical.
Each request cordons the node; the node goes down for repair once it is empty, or when the cap
is reached with work still on it (a human pulling the plug: that work is lost), and returns
after the repair time. The schedule is drawn before the simulation from the seed, the period
and the node names only, so what a policy does cannot change which nodes fail when.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

DAY = 86_400.0


@dataclass(frozen=True)
class MaintenanceConfig:
    """``rate`` is the expected fraction of the nodes sent for repair per day (0: none)."""

    rate: float = 0.0
    seed: int = 0
    repair_s: int = 4 * 3600
    #: A drain not done by then is stuck: someone has to step in (the node is taken down).
    stuck_after_s: int = 8 * 3600
    #: A given schedule of (time, node) instead of a drawn one: a cluster's real repair log.
    requests: tuple[tuple[float, str], ...] | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= 1.0 or math.isnan(self.rate):
            raise ValueError("--maintenance must be a fraction of nodes per day in [0, 1]")
        if self.repair_s < 0 or self.stuck_after_s <= 0:
            raise ValueError("repair time must be >= 0 and the stuck-drain cap > 0")

    @property
    def enabled(self) -> bool:
        return self.rate > 0 or bool(self.requests)

    def describe(self) -> str:
        if not self.enabled:
            return "no maintenance"
        if self.requests is not None:
            return f"{len(self.requests)} given repair requests, stuck after {self.stuck_after_s} s"
        return (
            f"{self.rate:.1%} of nodes per day sent for repair (seed {self.seed}), "
            f"down {self.repair_s / 3600:g} h once drained, stuck after "
            f"{self.stuck_after_s / 3600:g} h"
        )


def repair_requests(
    config: MaintenanceConfig, nodes: list[str], start: float, end: float
) -> list[tuple[float, str]]:
    """(time, node) of every repair request in ``[start, end)``, in time order: a Poisson process
    of ``rate x len(nodes)`` requests per day, each for a node drawn uniformly. Drawn with
    ``random.random`` only, whose sequence Python keeps stable for a given seed."""
    if config.requests is not None:
        return sorted((at, node) for at, node in config.requests if start <= at < end)
    if not config.enabled:
        return []
    return list(arrivals_on_nodes(config.rate, nodes, start, end, random.Random(config.seed)))


def arrivals_on_nodes(
    rate: float, nodes: list[str], start: float, end: float, draw: random.Random
) -> Iterator[tuple[float, str]]:
    """(time, node) of a Poisson process of ``rate x len(nodes)`` events a day in ``[start,
    end)``, each on a node drawn uniformly, in time order: two draws of ``draw`` each (the
    caller may draw more between them, the same generator going on). Repair requests and the
    world's late losses (world.py) come from it."""
    if rate <= 0 or not nodes or end <= start:
        return
    per_second = rate * len(nodes) / DAY
    at = start
    while True:
        at += -math.log(1.0 - draw.random()) / per_second
        if at >= end:
            return
        yield at, nodes[min(len(nodes) - 1, int(draw.random() * len(nodes)))]


@dataclass
class Drain:
    """One repair request as it played out."""

    node: str
    cordoned_at: float
    #: When the node was empty (None: not yet, or never because it was stuck).
    drained_at: float | None = None
    stuck: bool = False
    down_at: float | None = None

    def time_to_drain(self, end: float, cap: float) -> float:
        """Seconds from cordon to empty; a stuck drain counts as the cap and one still going at
        the end of the period with its time so far (lower bounds, like queue waits)."""
        if self.drained_at is not None:
            return self.drained_at - self.cordoned_at
        if self.stuck:
            return cap
        return max(0.0, end - self.cordoned_at)
