"""How a fold refuses a fact.

Kafka orders partitions, not topics: a reader can meet a placement before the registration of
its node, or before the preemption that freed its GPUs. Such a fact is not wrong, only early,
and a reader should hold it and try again once more of the log has been read. ``MissingFact``
says so by type, so no reader has to guess it from an error message."""

from __future__ import annotations


class FoldError(ValueError):
    """A fact the fold cannot accept; the message says why, naming the field."""


class MissingFact(FoldError):  # noqa: N818 (not an error in the fact: an early fact)
    """The fact depends on one the fold has not seen yet (something not created yet, or GPUs
    whose release has not been read yet): it may apply later."""
