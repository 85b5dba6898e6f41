"""Running a scheduling pass with Python's cyclic garbage collector paused.

A pass allocates hundreds of thousands of short-lived objects, none of them in reference
cycles; letting the collector traverse the (large, long-lived) scheduler state each time the
allocation counter trips doubles the pass time. Reference counting still frees everything;
the collector runs again as soon as the pass is over. Callers of the pure core (the
scheduler service, the simulator, the benchmark) wrap passes in this.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
