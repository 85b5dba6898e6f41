"""The codes of why pending work waits: declared once, here, for every reader.

The reasons themselves are :mod:`scheduling.why_pending`'s, each carrying its code; the API's
answers type their ``code`` from this enum (so its OpenAPI schema lists the codes), and its
words for each are at the edge (:mod:`services.api.sentences`). A module of its own, with no
import but the standard library's, so that the API's models, which the CLI parses answers with,
take the codes without loading the scheduling core."""

from __future__ import annotations

from enum import StrEnum


class PendingCode(StrEnum):
    """The kinds of reasons, with the codes clients already match on."""

    NO_SHARE = "no-share"
    NO_NODES = "no-nodes"
    FAIR_SHARE = "fair-share"
    FUNDED_FIRST = "funded-first"
    BUDGET_QUEUE = "budget-queue"
    TOO_LARGE = "too-large"
    FITS_NOW = "fits-now"
    INSUFFICIENT_CAPACITY = "insufficient-capacity"
    UNALLOCATED = "unallocated"
    CONTRACT = "contract"
    STARTING = "starting"
    RANKS_AHEAD = "ranks-ahead"
    CORDONED_NODES = "cordoned-nodes"
    DOWN_NODES = "down-nodes"
    ARRAY_LIMIT = "array-limit"
