"""torch.cuda of the GPU stand-in (see torch/__init__.py): the pod's played GPUs."""

from __future__ import annotations

import os
import time

from torch.cuda import nccl

__all__ = ["Event", "device_count", "get_device_name", "mem_get_info", "nccl", "set_device", "synchronize"]
NAME = "NVIDIA H100 80GB HBM3 (stand-in)"


def device_count() -> int:
    return int(os.environ.get("GRPO_STANDIN_GPUS") or 0)


def _check(index: int) -> None:
    if not 0 <= index < device_count():
        raise RuntimeError(f"CUDA error: invalid device ordinal {index} ({device_count()} stand-in GPUs)")


def mem_get_info(index: int = 0) -> tuple[int, int]:
    _check(index)
    total = int(float(os.environ.get("GRPO_STANDIN_GPU_MEMORY_GIB") or 80) * 2**30)
    return total, total


def get_device_name(index: int = 0) -> str:
    _check(index)
    return NAME


def set_device(index: int) -> None:
    _check(index)


def synchronize() -> None:
    return None


class Event:
    def __init__(self, enable_timing: bool = False) -> None:
        self._at = 0.0

    def record(self) -> None:
        self._at = time.perf_counter()

    def elapsed_time(self, end: Event) -> float:
        return max((end._at - self._at) * 1000, 1e-3)  # milliseconds, never 0 (no division by zero downstream)
