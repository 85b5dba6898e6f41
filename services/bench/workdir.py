"""Where a benchmark that starts a stack keeps its files: the caller's directory, or a
temporary one removed afterwards (the chaos, latency and idle benchmarks alike)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def bench_dir(data_dir: Path | None, name: str) -> Iterator[Path]:
    """``data_dir`` (created if missing), or ``fairshare-<name>-*`` in the temp directory."""
    if data_dir is not None:
        data_dir.mkdir(parents=True, exist_ok=True)
        yield data_dir
        return
    with tempfile.TemporaryDirectory(prefix=f"fairshare-{name}-") as tmp:
        yield Path(tmp)
