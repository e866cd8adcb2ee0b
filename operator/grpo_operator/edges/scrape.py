"""Scrape Prometheus text endpoints: the trainer's miles gauges and the reward service's health numbers.

Parsing uses prometheus_client's own text parser; the reading of metric names follows miles's collector
(`miles_metric_` + key with `/` and `-` turned into `_`, label `run_name`) and the reward service's
`reward_service_*` families. miles documents each gauge with its key, so the eval sets' gauges are read by their
HELP text (`eval/<name>`: a `-` in the name cannot be told from a `_` in the gauge's name).

A `Scraper` (made at start, one per operator) does not scrape an endpoint that timed out again for a while (per
URL, doubling from 5 s to 60 s; a success forgets it): a hung trainer or reward service costs its run one
timeout per backoff period instead of one per reconcile, so it cannot hold the worker threads every other run
needs. A refused connection fails at once and is retried at the next reconcile.
"""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from grpo_operator.edges.backoff import Backoff
from grpo_operator.status import evaluation
from grpo_operator.status.observation import EvalReading, TrainerMetrics

TRAINER_GAUGES = {
    "miles_metric_rollout_step": "rollout",
    "miles_metric_rollout_raw_reward": "raw_reward",
    "miles_metric_rollout_repetition_frac": "repetition_frac",
    "miles_metric_rollout_truncated_ratio": "truncated_ratio",
    "miles_metric_perf_step_time": "step_time_seconds",
}
REWARD_ERROR_RATIO = "reward_service_service_error_ratio"


class ScrapeError(RuntimeError):
    """The endpoint could not be read or parsed."""


@dataclass
class Scraper:
    """Reads metrics endpoints, holding back those that timed out recently."""

    slow: Backoff = field(default_factory=lambda: Backoff(first=5.0, most=60.0))

    def fetch(self, url: str, timeout: float) -> str:
        if not url.startswith(("http://", "https://")):
            raise ScrapeError(f"{url}: only http(s) metrics URLs are scraped")
        waiting = self.slow.waiting(url)
        if waiting is not None:
            raise ScrapeError(f"{url}: {waiting}")
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - scheme checked above
                body: bytes = response.read(8 * 1024 * 1024)
        except OSError as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            if isinstance(reason, (TimeoutError, socket.timeout)):
                self.slow.failed(url, f"timed out after {timeout:g}s")
            raise ScrapeError(f"{url}: {exc}") from None
        self.slow.succeeded(url)
        return body.decode("utf-8", errors="replace")


def _samples(text: str) -> Iterable[Sample]:
    try:
        for family in text_string_to_metric_families(text):
            yield from family.samples
    except ValueError as exc:
        raise ScrapeError(f"not Prometheus text: {exc}") from None


def _evals(keyed: dict[str, float]) -> tuple[EvalReading, ...]:
    step = keyed.get(evaluation.STEP_KEY)
    return () if step is None else evaluation.readings(int(step), keyed)


def trainer_metrics(text: str, run_name: str) -> TrainerMetrics:
    """The run's gauges; samples labelled for another run (a shared driver node) are ignored."""
    values: dict[str, float] = {}
    keyed: dict[str, float] = {}  # eval gauges by miles's key (their HELP text)
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as exc:
        raise ScrapeError(f"not Prometheus text: {exc}") from None
    for family in families:
        for sample in family.samples:
            if sample.labels.get("run_name", run_name) != run_name:
                continue
            field = TRAINER_GAUGES.get(sample.name)
            if field is not None:
                values[field] = float(sample.value)
            elif family.documentation.startswith("eval/"):
                keyed[family.documentation] = float(sample.value)
    rollout = values.pop("rollout", None)
    return TrainerMetrics(rollout=int(rollout) if rollout is not None else None, evals=_evals(keyed), **values)


def reward_error_ratio(text: str) -> float | None:
    for sample in _samples(text):
        if sample.name == REWARD_ERROR_RATIO:
            return float(sample.value)
    return None
