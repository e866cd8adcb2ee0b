"""The pool of scoring worker processes, seen from the event loop.

`ScoringPool` wraps a pebble `ProcessPool` (forkserver context; the forkserver preloads and warms
math_verify, so a replacement worker is a cheap fork). Every item is scheduled with the hard wall-clock
deadline: pebble kills a worker whose item overruns and starts a new one. The pool turns every way an
item can end into an `ItemResult` or a `PoolError`:

- the worker answered: its `ItemResult` (scored, no_answer, timeout by the worker's own budget, bad_label);
- killed at the hard deadline: `ItemResult(timeout)`; the response is what was too expensive;
- anything else (a worker that died, a broken pool, an exception from the scoring code): `PoolError`,
  a failure of the service that must never become a reward. A broken pool is replaced by a new one.

Worker starts are counted in shared memory by the workers themselves, so restarts are exact.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import logging
import multiprocessing
import threading
import time
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.sharedctypes import Synchronized
from typing import Any

import pebble

from reward_service import worker

log = logging.getLogger("reward_service.pool")

PRELOAD_MODULE = "reward_service.preload"
_WORKER_NAME = "pebble_pool_worker"


class PoolError(Exception):
    """The service failed to score an item (not a property of the response)."""


def _count_start_and_initialize(starts: Synchronized[int], config: worker.WorkerConfig) -> None:
    with starts.get_lock():
        starts.value += 1
    worker.initialize(config)


class _Generation:
    """One pebble pool and the futures scheduled on it, with the time of its last progress."""

    def __init__(self, pool: pebble.ProcessPool) -> None:
        self.pool = pool
        self.pending: set[concurrent.futures.Future[Any]] = set()
        self.last_progress = time.monotonic()

    def track(self, future: concurrent.futures.Future[Any]) -> None:
        if not self.pending:
            self.last_progress = time.monotonic()
        self.pending.add(future)
        future.add_done_callback(self._done)

    def _done(self, future: concurrent.futures.Future[Any]) -> None:
        self.pending.discard(future)
        self.last_progress = time.monotonic()

    def stalled_for(self) -> float:
        return time.monotonic() - self.last_progress if self.pending else 0.0

    def abandon(self, reason: str) -> None:
        """Fail every item still pending here: nothing in a replaced pool will ever finish them."""
        for future in list(self.pending):
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                future.set_exception(BrokenProcessPool(reason))


class ScoringPool:
    """Worker processes with a hard per-item deadline; `score` is awaited from the event loop.

    The pool is replaced when pebble reports it broken (all workers lost) or when it stalls: items
    pending and none finished for `stall_s` (more than any item may take). A stall is what a worker
    killed from outside (the OOM killer) leaves behind if it died holding pebble's channel lock.
    """

    def __init__(self, config: worker.WorkerConfig, workers: int, deadline_s: float) -> None:
        self.config = config
        self.workers = workers
        self.deadline_s = deadline_s
        self.stall_s = deadline_s + 10.0
        self.rebuilds = 0
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload([PRELOAD_MODULE])
        self._starts: Synchronized[int] | None = self._context.Value("q", 0)
        self._final_starts = 0
        self._generation: _Generation | None = None
        self._lock = threading.Lock()

    # --- lifecycle -------------------------------------------------------------------------------

    def _new_generation(self) -> _Generation:
        pool = pebble.ProcessPool(
            max_workers=self.workers,
            initializer=_count_start_and_initialize,
            initargs=(self._starts_counter(), self.config),
            context=self._context,
        )
        if not pool.active:  # starts the workers now rather than at the first request
            raise PoolError("the worker pool failed to start")
        return _Generation(pool)

    def start(self, warm_up_timeout_s: float = 120.0) -> None:
        """Start the workers and wait until each can answer (the first start loads the forkserver)."""
        generation = self._new_generation()
        futures = [generation.pool.schedule(worker.warm_up) for _ in range(self.workers)]
        for future in futures:
            future.result(timeout=warm_up_timeout_s)
        self._generation = generation

    def _current(self) -> _Generation:
        with self._lock:
            generation = self._generation
            if generation is None:
                raise PoolError("the worker pool is not running")
            reason = None
            if not generation.pool.active:
                reason = "the worker pool broke (all workers lost)"
            elif generation.stalled_for() > self.stall_s:
                reason = (
                    f"the worker pool stalled: {len(generation.pending)} items pending and none "
                    f"finished in {self.stall_s:g} s"
                )
            if reason is not None:
                log.error("%s; replacing it with a new pool", reason)
                self.rebuilds += 1
                old, generation = generation, self._new_generation()
                self._generation = generation
                old.abandon(reason)
                threading.Thread(target=_stop_quietly, args=(old.pool,), daemon=True).start()
            return generation

    def ensure_running(self) -> None:
        """Replace the pool if it broke or stalled; called periodically, so it heals without traffic."""
        with contextlib.suppress(PoolError):
            self._current()

    def close(self) -> None:
        """Stop the workers (killing any item still running) and wait for them to exit."""
        with self._lock:
            generation, self._generation = self._generation, None
        if generation is not None:
            generation.abandon("the service is shutting down")
            _stop_quietly(generation.pool)
        if self._starts is not None:  # release the shared counter's semaphore before exit
            self._final_starts, self._starts = int(self._starts.value), None
        del generation
        gc.collect()  # the pebble pool sits in reference cycles; free its semaphores now

    def _starts_counter(self) -> Synchronized[int]:
        if self._starts is None:
            raise PoolError("the worker pool was closed")
        return self._starts

    # --- observation -----------------------------------------------------------------------------

    def alive_workers(self) -> int:
        return sum(1 for p in multiprocessing.active_children() if p.name.startswith(_WORKER_NAME))

    @property
    def restarts(self) -> int:
        """Workers started after the initial ones: replacements of killed or dead workers."""
        starts = self._final_starts if self._starts is None else int(self._starts.value)
        return max(0, starts - self.workers * (1 + self.rebuilds))

    # --- scoring ---------------------------------------------------------------------------------

    async def score(self, label: str | None, response: str, prompt: Any = None) -> worker.ItemResult:
        generation = self._current()
        try:
            future = generation.pool.schedule(worker.score, args=(label, response, prompt), timeout=self.deadline_s)
        except RuntimeError as error:  # the pool broke between the check and the call
            raise PoolError(f"the worker pool is not accepting work: {error}") from error
        generation.track(future)
        try:
            # shield: a cancelled request must not cancel (and so kill) the worker's item
            return await asyncio.shield(asyncio.wrap_future(future))
        except concurrent.futures.TimeoutError:
            return worker.ItemResult(
                worker.TIMEOUT, 0.0, f"worker killed at the {self.deadline_s:g} s hard deadline and replaced"
            )
        except pebble.ProcessExpired as error:
            raise PoolError(f"the scoring worker died (exit code {error.exitcode})") from error
        except BrokenProcessPool as error:
            raise PoolError(f"the worker pool broke: {error}") from error
        except Exception as error:
            raise PoolError(f"scoring raised {type(error).__name__}: {error}") from error


def _stop_quietly(pool: pebble.ProcessPool) -> None:
    try:
        pool.stop()  # type: ignore[no-untyped-call]
        pool.join(timeout=10)
    except Exception:  # shutting down; nothing left to save
        log.exception("error while stopping a worker pool")
