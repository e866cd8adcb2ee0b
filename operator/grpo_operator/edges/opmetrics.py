"""The operator's own Prometheus metrics: reconciles, their duration, runs by phase, scrape errors, and per-run
gauges (phase, status reason, every condition, reward, repetition, progress, and `status.accounting`: GPU-hours,
lost GPU-hours, goodput, time to first rollout) for dashboards and alerts.

Alerts are built on the per-run gauges, never on per-run counters: each gauge is read from the run's last
status, and every series of a run disappears when the run is deleted (`forget`, called by the delete
handler), so no alert outlives its run or fires for a finished one from a counter that never resets.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Histogram,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from grpo_operator.api.status import ConditionType, GRPORunStatus, Phase


class RunCollector(Collector):
    """Per-run gauges, read from the last status each run reconciled to."""

    def __init__(self) -> None:
        self._runs: dict[tuple[str, str], GRPORunStatus] = {}
        self._lock = threading.Lock()

    def update(self, namespace: str, name: str, status: GRPORunStatus) -> None:
        with self._lock:
            self._runs[(namespace, name)] = status

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._runs.pop((namespace, name), None)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            runs = dict(self._runs)
        by_phase = GaugeMetricFamily("grpo_runs", "GRPORuns by phase", labels=["phase"])
        counts = {phase: 0 for phase in Phase}
        phase = GaugeMetricFamily(
            "grpo_run_phase", "1 for the run's current phase", labels=["namespace", "name", "phase"]
        )
        reward = GaugeMetricFamily("grpo_run_reward", "Last rollout/raw_reward", labels=["namespace", "name"])
        repetition = GaugeMetricFamily(
            "grpo_run_repetition_frac", "Last rollout/repetition_frac", labels=["namespace", "name"]
        )
        rollout = GaugeMetricFamily("grpo_run_rollout", "Last rollout step seen", labels=["namespace", "name"])
        healthy = GaugeMetricFamily(
            "grpo_run_healthy", "1 healthy, 0 degenerate or stalled", labels=["namespace", "name"]
        )
        reason = GaugeMetricFamily(
            "grpo_run_status",
            "1, labelled with the run's phase and its reason",
            labels=["namespace", "name", "phase", "reason"],
        )
        condition = GaugeMetricFamily(
            "grpo_run_condition",
            "1 for each condition, labelled with its status and reason",
            labels=["namespace", "name", "type", "status", "reason"],
        )
        attempt = GaugeMetricFamily(
            "grpo_run_attempt", "Jobs the run has started (1 + resumes)", labels=["namespace", "name"]
        )
        accounting = _AccountingGauges()
        for (namespace, name), status in runs.items():
            accounting.add(namespace, name, status)
            if status.phase is not None:
                counts[status.phase] += 1
                for candidate in Phase:
                    phase.add_metric([namespace, name, candidate.value], 1.0 if candidate is status.phase else 0.0)
                reason.add_metric([namespace, name, status.phase.value, status.reason or ""], 1.0)
            for cond in status.conditions:
                condition.add_metric([namespace, name, cond.type, cond.status, cond.reason], 1.0)
            if status.attempt is not None:
                attempt.add_metric([namespace, name], status.attempt)
            metrics = status.metrics
            if metrics is not None and metrics.raw_reward is not None:
                reward.add_metric([namespace, name], metrics.raw_reward)
            if metrics is not None and metrics.repetition_frac is not None:
                repetition.add_metric([namespace, name], metrics.repetition_frac)
            if metrics is not None and metrics.rollout is not None:
                rollout.add_metric([namespace, name], metrics.rollout)
            health = next((c for c in status.conditions if c.type == ConditionType.HEALTHY), None)
            if health is not None and health.status != "Unknown":
                healthy.add_metric([namespace, name], 1.0 if health.status == "True" else 0.0)
        for key, count in counts.items():
            by_phase.add_metric([key.value], count)
        yield from (by_phase, phase, reason, condition, attempt, reward, repetition, rollout, healthy)
        yield from accounting.families


class _AccountingGauges:
    """The per-run gauges of `status.accounting`."""

    def __init__(self) -> None:
        labels = ["namespace", "name"]
        self.gpu_hours = GaugeMetricFamily("grpo_run_gpu_hours", "GPU-hours the run's bound pods held", labels=labels)
        self.lost = GaugeMetricFamily(
            "grpo_run_lost_gpu_hours", "GPU-hours of failed attempts, lost rollouts and resumes' warm-up", labels=labels
        )
        self.goodput = GaugeMetricFamily(
            "grpo_run_goodput", "GPU time of rollouts that count / GPU time held", labels=labels
        )
        self.first_rollout = GaugeMetricFamily(
            "grpo_run_time_to_first_rollout_seconds", "From the run's creation to its first rollout", labels=labels
        )

    @property
    def families(self) -> tuple[GaugeMetricFamily, ...]:
        return (self.gpu_hours, self.lost, self.goodput, self.first_rollout)

    def add(self, namespace: str, name: str, status: GRPORunStatus) -> None:
        acc = status.accounting
        if acc is None:
            return
        self.gpu_hours.add_metric([namespace, name], acc.gpu_hours)
        self.lost.add_metric([namespace, name], acc.lost_gpu_hours)
        if acc.goodput is not None:
            self.goodput.add_metric([namespace, name], acc.goodput)
        if acc.time_to_first_rollout_seconds is not None:
            self.first_rollout.add_metric([namespace, name], acc.time_to_first_rollout_seconds)


class OperatorMetrics:
    """The operator's metrics in their own registry (with the process collectors), made once at start."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            self.registry.register(collector)
        self.reconciles = Counter("grpo_operator_reconcile", "Reconciles by result", ["result"], registry=self.registry)
        self.reconcile_seconds = Histogram(
            "grpo_operator_reconcile_duration_seconds", "Duration of one reconcile", registry=self.registry
        )
        self.scrape_errors = Counter(
            "grpo_operator_scrape_errors", "Failed metric scrapes by target", ["target"], registry=self.registry
        )
        self.runs = RunCollector()
        self.registry.register(self.runs)

    def serve(self, port: int) -> None:
        """Serve /metrics on `port` (0: not at all); an OSError when the port cannot be bound."""
        if port:
            start_http_server(port, registry=self.registry)
