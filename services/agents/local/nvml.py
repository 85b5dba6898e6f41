"""This machine's GPUs, read through NVML (``pynvml``, package nvidia-ml-py) when a driver is
present: :func:`open_nvml` says None when it is not, and the local adapter then offers virtual GPU
slots that read 0 % and 0 bytes."""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Protocol

from services.agents.adapter import GpuSample

log = logging.getLogger(__name__)


class GpuProbe(Protocol):
    """What the local adapter reads GPUs with: NVML, or a stand-in in tests."""

    count: int

    def gpu_type(self) -> str: ...

    def sample(self, index: int) -> GpuSample: ...

    def shutdown(self) -> None: ...


class Nvml:
    """The few NVML calls the agent makes, behind one object (a :class:`GpuProbe`)."""

    def __init__(self) -> None:
        import pynvml  # type: ignore[import-untyped]

        pynvml.nvmlInit()
        self._nvml: Any = pynvml
        self.count: int = int(pynvml.nvmlDeviceGetCount())
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(self.count)]

    def gpu_type(self) -> str:
        if not self._handles:
            return "none"
        name = self._nvml.nvmlDeviceGetName(self._handles[0])
        text = name.decode() if isinstance(name, bytes) else str(name)
        return "-".join(text.split()) or "gpu"

    def sample(self, index: int) -> GpuSample:
        handle = self._handles[index]
        memory = self._nvml.nvmlDeviceGetMemoryInfo(handle)
        rates = self._nvml.nvmlDeviceGetUtilizationRates(handle)
        total = int(memory.total)
        return GpuSample(
            index=index,
            utilisation_pct=float(min(100, max(0, rates.gpu))),
            memory_used_bytes=min(int(memory.used), total),
            memory_total_bytes=total,
        )

    def shutdown(self) -> None:
        with contextlib.suppress(Exception):  # a library that may be half gone
            self._nvml.nvmlShutdown()


def open_nvml() -> Nvml | None:
    """NVML if a driver answers, else None (never raises: no GPU is a normal case)."""
    try:
        nvml = Nvml()
    except Exception as error:  # pynvml raises many kinds
        log.info("NVML unavailable; using virtual GPU slots", extra={"reason": str(error)})
        return None
    if nvml.count == 0:
        nvml.shutdown()
        return None
    return nvml
