"""Per-target backoff for what the operator reaches over the network besides the API server: a run's Ray Jobs
API and its metrics endpoints; and for a run's dry runs the API server could not answer (5xx, 429: `dry_run_key`),
whose run has no child to watch yet, so its timer tick waits for the backoff (controller/children.py).

One unreachable Ray head or a scrape that times out must not cost every reconcile of that run the full
timeout, nor hold a worker thread other runs need. After a failure the target is not tried again for a delay
that doubles per consecutive failure, from `first` up to `most` seconds; a success forgets it. While a target
waits, the call fails at once with the same kind of error as an unreachable target (the observation is the
same: not reached), its message saying when the next try is. `retry_now` forgets a target early, e.g. when
its RayCluster changed (the head may be up now).

Keys are per run: a Ray target is (address, token) and every run has its own token; a scrape target is the URL.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar

from grpo_operator.edges.rayjobs import RayJobs, RayUnavailable
from grpo_operator.render import JobSubmission
from grpo_operator.status.observation import JobObservation

T = TypeVar("T")


@dataclass
class _State:
    failures: int
    until: float
    error: str
    delay: float


def dry_run_key(namespace: str, run: str) -> str:
    """The backoff key of a run's dry runs the API server could not answer (controller/reconciler.py)."""
    return f"dry-run {namespace}/{run}"


@dataclass
class Backoff:
    first: float = 5.0
    most: float = 60.0
    clock: Callable[[], float] = time.monotonic
    _states: dict[str, _State] = field(default_factory=dict, init=False, repr=False)
    _guard: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def waiting(self, key: str) -> str | None:
        """Why `key` is not tried now, or None when it may be."""
        with self._guard:
            state = self._states.get(key)
            now = self.clock()
            if state is None or state.until <= now:
                return None
            # The same words for the whole wait, so a status carrying them is not rewritten at every reconcile.
            return (
                f"not retried within a {state.delay:g}s backoff after {state.failures} failed "
                f"attempt{'s' if state.failures > 1 else ''}: {state.error}"
            )

    def failed(self, key: str, error: str) -> None:
        with self._guard:
            failures = self._states[key].failures + 1 if key in self._states else 1
            delay = min(self.most, self.first * 2 ** (failures - 1))
            self._states[key] = _State(failures, self.clock() + delay, error, delay)

    def succeeded(self, key: str) -> None:
        with self._guard:
            self._states.pop(key, None)

    def retry_now(self, prefix: str) -> None:
        """Forget every target whose key starts with `prefix`."""
        with self._guard:
            for key in [k for k in self._states if k.startswith(prefix)]:
                del self._states[key]


def ray_key(address: str, token: str | None) -> str:
    digest = hashlib.sha256((token or "").encode()).hexdigest()[:16]  # the token itself is never kept
    return f"ray {address} {digest}"


@dataclass
class BackedOffRayJobs(RayJobs):
    """`RayJobs` that does not call a head that failed recently (see the module docstring). `stop` always
    tries: stopping a job is never postponed."""

    backoff: Backoff = field(default_factory=Backoff, repr=False)

    def _guarded(self, call: Callable[[], T]) -> T:
        key = ray_key(self.address, self.token)
        why = self.backoff.waiting(key)
        if why is not None:
            raise RayUnavailable(f"Ray Jobs API at {self.address} {why}")
        try:
            result = call()
        except RayUnavailable as exc:
            if self.backoff.waiting(key) is None:  # submit's own lookup may have counted this failure already
                self.backoff.failed(key, str(exc))
            raise
        self.backoff.succeeded(key)
        return result

    def find(self, submission_id: str) -> JobObservation | None:
        return self._guarded(partial(RayJobs.find, self, submission_id))

    def submit(self, job: JobSubmission) -> JobObservation:
        return self._guarded(partial(RayJobs.submit, self, job))

    def logs(self, submission_id: str) -> str:
        return self._guarded(partial(RayJobs.logs, self, submission_id))


def ray_for(backoff: Backoff) -> Callable[[str, str | None], RayJobs]:
    """A `Reconciler.ray_for` whose clients share `backoff`."""

    def make(address: str, token: str | None) -> RayJobs:
        return BackedOffRayJobs(address, token, backoff=backoff)

    return make
