"""torch.distributed of the GPU stand-in (see torch/__init__.py): one rank, whose collectives return their input."""

from __future__ import annotations

from enum import Enum
from typing import Any


class ReduceOp(Enum):
    SUM = "sum"
    MAX = "max"
    MIN = "min"


_group: dict[str, int] = {}  # the process group of this process (torch keeps one per process too)


def init_process_group(backend: str, rank: int = 0, world_size: int = 1, **_: Any) -> None:
    if world_size != 1:
        raise RuntimeError(f"the GPU stand-in plays one rank per node, not {world_size}: advertise one GPU")
    _group["world"] = world_size


def all_reduce(tensor: Any, op: ReduceOp = ReduceOp.SUM) -> None:
    if _group.get("world") != 1:
        raise RuntimeError("Default process group has not been initialized")


def barrier() -> None:
    all_reduce(None)


def destroy_process_group() -> None:
    _group.clear()
