"""The throttle of a job array (``--array 0-999%50``): at most K of its elements hold GPUs at once.

Enforced where the scheduler finds its candidates, in the fold's pending queues
(``ClusterIndexes.pending``): of an array's pending elements, only the first ``K - running``
(in queue order: priority, submit time, index) are queued there; the others are *held* here,
out of every pass's sight. A placement moves none in (the run counts at once), an end or a
cancellation moves the next one in. So no pass, baseline or start estimate has a rule of its
own to forget, and ``fairshare audit decisions`` re-derives the throttle with the fold it
replays: the queues are a function of the facts.

``running`` counts elements placed or running, those being stopped included: a run that was
sent its preempt command still holds its GPUs until its agent reports the end, and a throttle
protects what the elements share (a licence server, a file system), not the scheduler's view.
Per array, moves cost O(log N): a 10,000-element array is queued 50 at a time, never
re-sorted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sortedcontainers import SortedList

if TYPE_CHECKING:
    from projections.cluster_types import QueueKey, WorkloadState


@dataclass(slots=True)
class ArrayGate:
    """One throttled array's pending elements, split between the queues and the hold."""

    limit: int
    #: Elements placed or running, those being stopped included.
    running: int = 0
    #: Pending elements in the scheduler's queues, and those held back, by queue key.
    queued: SortedList[QueueKey] = field(default_factory=SortedList)
    held: SortedList[QueueKey] = field(default_factory=SortedList)
    #: Every pending element, by id (a key names the workload to move).
    pending: dict[str, WorkloadState] = field(default_factory=dict)

    @property
    def opening(self) -> int:
        """How many pending elements may be queued: the limit less what runs (a log whose
        leader placed more than the limit, as an older scheduler might have, queues none)."""
        return max(0, self.limit - self.running)

    def add(self, workload: WorkloadState) -> None:
        """A pending element, held until :meth:`balance` queues it."""
        self.pending[workload.workload_id] = workload
        self.held.add(workload.queue_key())

    def remove(self, workload: WorkloadState) -> bool:
        """An element that is no longer pending; True if it was queued (the caller takes it
        out of the scheduler's queues)."""
        self.pending.pop(workload.workload_id, None)
        key = workload.queue_key()
        if key in self.queued:
            self.queued.remove(key)
            return True
        self.held.discard(key)
        return False

    def balance(self) -> tuple[list[WorkloadState], list[WorkloadState]]:
        """Move elements so that the first ``opening`` pending ones are queued and no other
        is: (to queue, to take out of the queues)."""
        enter: list[WorkloadState] = []
        leave: list[WorkloadState] = []
        while len(self.queued) > self.opening:
            leave.append(self._move(self.queued, self.held, -1))
        while len(self.queued) < self.opening and self.held:
            enter.append(self._move(self.held, self.queued, 0))
        while self.held and self.queued and self.held[0] < self.queued[-1]:
            # an element requeued (or put back) ahead of what is queued takes its place
            leave.append(self._move(self.queued, self.held, -1))
            enter.append(self._move(self.held, self.queued, 0))
        return enter, leave

    def is_held(self, workload: WorkloadState) -> bool:
        return workload.queue_key() in self.held

    def _move(
        self, source: SortedList[QueueKey], target: SortedList[QueueKey], at: int
    ) -> WorkloadState:
        key = source.pop(at)
        target.add(key)
        return self.pending[key[3]]
