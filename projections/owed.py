"""What a budget is owed, defined once (docs/design.md section 6).

A budget is owed the integral over time of ``min(entitled GPUs, GPUs wanted)``, entitled being
share x capacity: a team that asks for nothing is owed nothing, and a sibling's unused
entitlement is owed to no one (an inner budget is owed the sum of its leaves). The API, the
charges report and the simulator's metrics all integrate it here, so they cannot disagree on
what "owed" means; each only says where its pieces are cut and what is wanted on them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from itertools import pairwise
from typing import TypeVar

#: Instants: whole epoch seconds (reports) or fractional ones (live state, simulator).
T = TypeVar("T", int, float)
#: Whatever is owed something: a leaf budget.
K = TypeVar("K", bound=Hashable)


def owed_pieces(
    cuts: Iterable[T],
    wanted: Callable[[T, T], Mapping[K, float]],
    entitled: Callable[[T], Mapping[K, float]],
) -> Iterator[tuple[T, T, dict[K, float]]]:
    """``(start, end, GPU-seconds owed per key)`` of every piece between consecutive ``cuts``
    on which something is wanted.

    ``wanted(a, b)`` is the GPU-seconds each key wants over ``[a, b)``; ``entitled(a)`` the GPUs
    each key is entitled to there. The cuts must fall wherever either changes, so that both are
    constant on every piece and the sum of the pieces is the integral. A piece is owed
    ``min(entitled x length, wanted)``: for a constant demand that is ``min(entitled, demand) x
    length`` to the last bit (rounding is monotone), and where demand is known only as a total
    over the piece (the simulator's hours) its mean over the piece stands for it.

    ``entitled`` is asked only about pieces on which something is wanted: it is the expensive
    side (shares over the whole tree), and an idle stretch needs none."""
    for a, b in pairwise(cuts):
        demand = {key: gpu_s for key, gpu_s in wanted(a, b).items() if gpu_s > 0}
        if not demand:
            continue
        gpus = entitled(a)
        yield a, b, {key: float(min(gpus.get(key, 0.0) * (b - a), w)) for key, w in demand.items()}


def owed(
    cuts: Iterable[T],
    wanted: Callable[[T, T], Mapping[K, float]],
    entitled: Callable[[T], Mapping[K, float]],
) -> dict[K, float]:
    """GPU-seconds owed per key over the whole of ``cuts`` (see :func:`owed_pieces`); a key
    that never wanted anything is absent, not zero."""
    totals: dict[K, float] = {}
    for _a, _b, piece in owed_pieces(cuts, wanted, entitled):
        for key, amount in piece.items():
            totals[key] = totals.get(key, 0.0) + amount
    return totals
