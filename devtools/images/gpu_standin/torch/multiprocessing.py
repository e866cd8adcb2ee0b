"""torch.multiprocessing of the GPU stand-in (see torch/__init__.py): spawn runs each rank in a child process, as
torch's does, and raises when one fails."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from typing import Any


def spawn(fn: Callable[..., None], args: tuple[Any, ...] = (), nprocs: int = 1, join: bool = True) -> None:
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=fn, args=(rank, *args)) for rank in range(nprocs)]
    for process in processes:
        process.start()
    for rank, process in enumerate(processes):
        process.join()
        if process.exitcode != 0:
            raise RuntimeError(f"process {rank} terminated with exit code {process.exitcode}")
