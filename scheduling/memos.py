"""What the scheduler remembers from one pass to the next, apart from the cluster state.

A pass could rebuild everything it needs from the state (its facts, and the indexes the fold
keeps) every time; at scale it cannot afford to. So it keeps, per cluster state it schedules:

* ``lane``: the debug lane's index of lane workloads (``debug_lane.LaneIndex``);
* ``pools``: per pool, the victim index, the failed preemption searches and what stopping each
  run would waste (``preemption.PreemptionMemo``).

Every memo is exact: it only skips work whose result is known, and is checked against the
state's change marks (``ClusterIndexes``) before use, so decisions are the same with or without
it (``tests/unit/test_churn.py::test_caches_change_no_decision``).

**Who owns them.** Whoever runs the passes, not the state: the fold holds facts and what it
derives from them for every reader, while these are the scheduler's working memory, of no use
to the read models, and a copy of the state must neither carry nor share them. The scheduler
service and the simulator engine each hold one :class:`PassMemos` and hand it to every pass
(:func:`~scheduling.scheduling_pass.run_pass`); so does ``fairshare audit decisions``, which
re-derives the passes in place on the one state it folds (``services/audit/decisions.py``). A
pass given no memos starts cold: the same decisions, at the cost of rebuilding everything.

The service and the audit fold with ``LiveState``, which forgets ended work once a day of event
time; the simulator's fold never forgets. A memo must therefore not assume the state's
workloads only grow (the lane index starts over when the fold has forgotten some,
``ClusterIndexes.workloads_forgotten``): one that did made the audit, and the live scheduler,
decide otherwise than the simulator after the first forget (``test_audit_forgetting.py``).

**Tied to one state.** Memos describe the state object they were built from (the lane index
counts the workloads it has read; the victim index follows the fold's change list). Rather
than trust every owner to drop them whenever it replaces its state (the service rebuilds its
state from the log after a lost lease), :meth:`PassMemos.serving` ties them to one state, by a
weak reference, and empties them when they are handed another.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

from projections.cluster_state import ClusterState
from scheduling.debug_lane import LaneIndex
from scheduling.preemption import PreemptionMemo


@dataclass
class PassMemos:
    """The scheduler's memos for one cluster state (see the module docstring)."""

    lane: LaneIndex = field(default_factory=LaneIndex)
    pools: dict[str, PreemptionMemo] = field(default_factory=dict)
    _state: weakref.ref[ClusterState] | None = field(default=None, repr=False, compare=False)

    def serving(self, cluster: ClusterState) -> PassMemos:
        """These memos, for ``cluster``: emptied first when they were built for another."""
        if self._state is None or self._state() is not cluster:
            self.lane = LaneIndex()
            self.pools = {}
            self._state = weakref.ref(cluster)
        return self

    def of_pool(self, pool: str) -> PreemptionMemo:
        memo = self.pools.get(pool)
        if memo is None:
            memo = self.pools[pool] = PreemptionMemo()
        return memo
