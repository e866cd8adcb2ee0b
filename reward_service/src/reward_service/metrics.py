"""Prometheus metrics of the reward service (served at `/metrics` in the text exposition format).

- `reward_service_requests_total{outcome}`: items by outcome (a batch counts each of its items);
- `reward_service_request_duration_seconds{endpoint}`: latency of each HTTP scoring request;
- `reward_service_pool_workers` / `reward_service_pool_workers_desired`: worker processes alive / configured;
- `reward_service_queue_depth`: items admitted and not finished (bounded by REWARD_MAX_QUEUE);
- `reward_service_worker_restarts_total`: workers started to replace a killed or dead one;
- `reward_service_pool_rebuilds_total`: times the whole pool broke and was replaced;
- `reward_service_ready` and `reward_service_service_error_ratio`: the readiness rule's inputs.

Each app instance has its own registry, so two apps in one process (tests) do not collide.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from reward_service.health import Outcome

LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 5.0, 10.0, 30.0, 60.0)


class _LiveCollector(Collector):
    """Values read at scrape time from the pool and the health window."""

    def __init__(self, read: Callable[[], dict[str, float]]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        values = self._read()
        yield GaugeMetricFamily(
            "reward_service_pool_workers", "Scoring worker processes alive", value=values["pool_workers"]
        )
        yield GaugeMetricFamily(
            "reward_service_pool_workers_desired",
            "Scoring worker processes configured",
            value=values["pool_workers_desired"],
        )
        yield GaugeMetricFamily(
            "reward_service_queue_depth", "Items admitted and not yet finished", value=values["queue_depth"]
        )
        yield CounterMetricFamily(
            "reward_service_worker_restarts", "Workers started to replace a lost one", value=values["worker_restarts"]
        )
        yield CounterMetricFamily(
            "reward_service_pool_rebuilds", "Times the whole worker pool was replaced", value=values["pool_rebuilds"]
        )
        yield GaugeMetricFamily("reward_service_ready", "1 when /ready answers 200", value=values["ready"])
        yield GaugeMetricFamily(
            "reward_service_service_error_ratio",
            "Service errors / items over the readiness window",
            value=values["service_error_ratio"],
        )


class ServiceMetrics:
    def __init__(self, read_live: Callable[[], dict[str, float]]) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "reward_service_requests", "Scoring items by outcome", ["outcome"], registry=self.registry
        )
        for outcome in Outcome:
            self.requests.labels(outcome=outcome.value)  # every outcome is exported from the start, at 0
        self.latency = Histogram(
            "reward_service_request_duration_seconds",
            "Latency of scoring requests",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_LiveCollector(read_live))

    def count(self, outcome: Outcome, items: int = 1) -> None:
        self.requests.labels(outcome=outcome.value).inc(items)
