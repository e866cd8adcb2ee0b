"""Request outcomes and the readiness rule built on them.

Every item the service is asked to score ends in exactly one `Outcome`. Only `SERVICE_ERROR` says the
service itself is failing; `HealthWindow` keeps per-second counts of items and service errors over the
last `window_s` seconds, and the service is ready while the error ratio in that window stays at or below
`max_ratio` (ignored until `min_requests` items were seen, so one early failure cannot flip it). The
window is time-based, so a pod taken out of the Service's endpoints recovers once the errors age out.

Readiness is a latch, so it recovers deterministically: only a service error can make the service
unready (when, counting that error, the window's ratio is over the threshold), and it becomes ready again
as soon as the ratio is back under it, by successes or by the errors ageing out. Successes that age out
of the window before older errors can never flip a recovered service back to unready: a window that was
healthy when its last error happened stays healthy until another error.
"""

from __future__ import annotations

import enum
import math
import time
from collections import deque
from collections.abc import Callable


class Outcome(enum.StrEnum):
    SCORED = "scored"  # a reward was computed
    NO_ANSWER = "no_answer"  # the response has no final answer: reward 0.0
    TIMEOUT = "timeout"  # verifying the response overran its deadline: 0.0 or 503 (REWARD_ON_TIMEOUT)
    BAD_LABEL = "bad_label"  # the gold label is unusable: 422
    BAD_REQUEST = "bad_request"  # the body does not match the schema: 422
    OVERLOADED = "overloaded"  # the queue is full: 503 with Retry-After
    SERVICE_ERROR = "service_error"  # the service failed (dead worker, bug): 503, never a reward


class HealthWindow:
    """Sliding per-second counts of items and service errors."""

    def __init__(
        self,
        window_s: float,
        min_requests: int,
        max_ratio: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window_s = window_s
        self.min_requests = min_requests
        self.max_ratio = max_ratio
        self._clock = clock
        self._buckets: deque[list[int]] = deque()  # [second, items, service_errors]
        self._unready = False

    def _prune(self, now: float) -> None:
        oldest = math.floor(now - self.window_s)
        while self._buckets and self._buckets[0][0] <= oldest:
            self._buckets.popleft()

    def record(self, outcome: Outcome) -> None:
        if outcome in (Outcome.BAD_REQUEST, Outcome.OVERLOADED):
            return  # neither says anything about whether scoring works
        now = self._clock()
        second = math.floor(now)
        if not self._buckets or self._buckets[-1][0] != second:
            self._buckets.append([second, 0, 0])
        bucket = self._buckets[-1]
        bucket[1] += 1
        bucket[2] += outcome is Outcome.SERVICE_ERROR
        self._prune(now)
        if outcome is Outcome.SERVICE_ERROR or self._unready:
            self._unready = self._over_threshold()

    def counts(self) -> tuple[int, int]:
        """(items, service errors) in the window."""
        self._prune(self._clock())
        return sum(b[1] for b in self._buckets), sum(b[2] for b in self._buckets)

    def error_ratio(self) -> float:
        items, errors = self.counts()
        return errors / items if items else 0.0

    def _over_threshold(self) -> bool:
        items, errors = self.counts()
        return items >= self.min_requests and errors / items > self.max_ratio

    def failing(self) -> bool:
        """Unready: set by a service error over the threshold, cleared once the window is under it."""
        if self._unready and not self._over_threshold():
            self._unready = False
        return self._unready
