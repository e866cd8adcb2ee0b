"""A stand-in `torch` for the ray-node-gpu dev layer: only what the launcher's preflight children call
(grpo_launcher/gpu_probe.py and grpo_launcher/allreduce.py), answering for the GPUs the pod was given.

The GPUs are played: `GRPO_STANDIN_GPUS` devices (the runtime's pod env, what the node advertises as nvidia.com/gpu)
of `GRPO_STANDIN_GPU_MEMORY_GIB` each, all free. A tensor holds one value for all its elements, which is all the
all-reduce check reads (it fills every element with one value and compares every element with one value); a
collective over one rank returns its input, as NCCL's does; more than one rank per node is not played and says so.
No real torch is in the image: miles is the double (fake_miles.py), which never imports torch.
"""

from __future__ import annotations

import time
from typing import Any

from torch import cuda, version

__version__ = "0.0.0+gpu.standin"
__all__ = ["Tensor", "cuda", "device", "empty", "tensor", "version"]


class dtype:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"torch.{self.name}"


bfloat16, float64, int32 = dtype("bfloat16"), dtype("float64"), dtype("int32")


class device:
    def __init__(self, kind: str, index: int = 0) -> None:
        self.type, self.index = kind, index


class Tensor:
    """A tensor whose elements all hold one value."""

    def __init__(self, value: Any, numel: int = 1) -> None:
        self.value, self.numel = value, numel

    def fill_(self, value: Any) -> Tensor:
        self.value = value
        return self

    __hash__ = None  # type: ignore[assignment]  # like torch's elementwise ==, no hash by value

    def __eq__(self, other: object) -> Tensor:  # type: ignore[override]
        return Tensor(self.value == (other.value if isinstance(other, Tensor) else other), self.numel)

    def all(self) -> Tensor:
        return Tensor(bool(self.value))

    def item(self) -> Any:
        return self.value


def empty(numel: int, dtype: dtype | None = None, device: device | None = None) -> Tensor:
    return Tensor(0, numel)


def tensor(values: list[Any], dtype: dtype | None = None, device: device | None = None) -> Tensor:
    if len(values) != 1:
        raise RuntimeError("the GPU stand-in plays one-element tensors only")
    return Tensor(values[0])


def _now_ms() -> float:
    return time.perf_counter() * 1000
