"""Which timer ticks reconcile a run (children are watched; the timer polls Ray), and the per-target backoff
of an unreachable Ray head or a hung scrape. Pure: a hand-driven clock, no API server."""

from __future__ import annotations

from typing import Any

import pytest
from grpo_operator.controller.children import Pacing, owner_body
from grpo_operator.controller.config import OperatorSettings
from grpo_operator.edges.backoff import BackedOffRayJobs, Backoff, ray_key
from grpo_operator.edges.rayjobs import RayUnavailable


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Tokens:
    """The part of KubeCache that Pacing reads."""

    def known_token(self, namespace: str, run: str) -> str | None:
        return "tok"

    def forget_run(self, namespace: str, run: str) -> None: ...

    def forget_token(self, namespace: str, run: str) -> None: ...


def body(**status: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": "r"}, "status": status}


def pacing(clock: Clock) -> tuple[Pacing, Backoff]:
    settings = OperatorSettings(ray_address="http://127.0.0.1:1", reconcile_interval_seconds=15)
    backoff = Backoff(first=15, most=60, clock=clock)
    return Pacing(settings, Tokens(), backoff, clock=clock), backoff  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("status", "due"),
    [
        pytest.param(
            {"phase": "Provisioning", "reason": "Provisioning"},
            False,
            id="a cluster being provisioned waits for KubeRay's watch",
        ),  # waiting for KubeRay: its watch reports it
        pytest.param(
            {"phase": "Pending", "reason": "Provisioning"}, False, id="a pending run waits for KubeRay's watch"
        ),
        pytest.param(
            {"phase": "Provisioning", "reason": "Submitting"}, True, id="a job to submit polls Ray"
        ),  # a job to submit: Ray is polled
        pytest.param(
            {"phase": "Running", "reason": "Running", "jobSubmissionId": "r-1"}, True, id="a running job polls Ray"
        ),  # metrics and the job's state
        pytest.param(
            {"phase": "Succeeded", "reason": "Succeeded", "jobSubmissionId": "r-1"},
            False,
            id="a terminal run is not polled",
        ),
    ],
)
def test_a_tick_reconciles_only_runs_with_ray_work_between_resyncs(status: dict[str, Any], due: bool) -> None:
    clock = Clock()
    pace, _ = pacing(clock)
    assert pace.due(body(**status))  # never reconciled by this process yet
    pace.reconciled("ns", "r")
    clock.now += 15
    assert pace.due(body(**status)) is due
    clock.now += 45  # four intervals since the last reconcile: every run is reconciled again
    assert pace.due(body(**status))


def test_a_run_whose_ray_head_failed_is_not_polled_until_its_backoff_ends_or_its_raycluster_changes() -> None:
    clock = Clock()
    pace, backoff = pacing(clock)
    pace.reconciled("ns", "r")
    running = body(phase="Running", reason="Running", jobSubmissionId="r-1")
    key = ray_key("http://127.0.0.1:1", "tok")
    backoff.failed(key, "connection refused")
    clock.now += 10
    assert not pace.due(running)
    clock.now += 6  # 15 s after the failure
    assert pace.due(running)
    backoff.failed(key, "connection refused")  # the second failure in a row waits 30 s
    clock.now += 20
    assert not pace.due(running)
    pace.child_changed("ns", "r", "RayCluster", deleted=False)  # the head may be up now
    assert pace.due(running)


def test_backoff_doubles_up_to_its_cap_says_when_it_retries_and_forgets_on_success() -> None:
    clock = Clock()
    backoff = Backoff(first=5, most=20, clock=clock)
    delays = []
    for _ in range(4):
        backoff.failed("k", "timed out after 5s")
        start = clock.now
        while backoff.waiting("k"):
            clock.now += 1
        delays.append(clock.now - start)
    assert delays == [5, 10, 20, 20]
    backoff.failed("k", "timed out after 5s")
    said = "not retried within a 20s backoff after 5 failed attempts: timed out after 5s"
    assert backoff.waiting("k") == said
    clock.now += 19
    assert backoff.waiting("k") == said  # the same words for the whole wait: no status rewrite per reconcile
    backoff.succeeded("k")
    assert backoff.waiting("k") is None


def test_an_unreachable_ray_head_costs_one_attempt_per_backoff_period() -> None:
    clock = Clock()
    backoff = Backoff(first=15, most=60, clock=clock)
    ray = BackedOffRayJobs("http://127.0.0.1:9", "tok", backoff=backoff)  # port 9 (discard): nothing listens
    with pytest.raises(RayUnavailable):
        ray.find("r-1")
    with pytest.raises(RayUnavailable, match="not retried within a 15s backoff after 1 failed attempt"):
        ray.find("r-1")  # no second attempt within the backoff: the error says so at once


def test_a_child_names_its_owning_run_by_label_and_owner_reference() -> None:
    child = {
        "kind": "RayCluster",
        "metadata": {
            "name": "r-ray",
            "namespace": "ns",
            "labels": {"grpo.dev/run": "r"},
            "ownerReferences": [{"apiVersion": "grpo.dev/v1alpha1", "kind": "GRPORun", "name": "r", "uid": "u-1"}],
        },
    }
    assert owner_body(child) == {
        "apiVersion": "grpo.dev/v1alpha1",
        "kind": "GRPORun",
        "metadata": {"name": "r", "namespace": "ns", "uid": "u-1"},
    }
    child["metadata"]["ownerReferences"] = []
    assert owner_body(child) is None  # labelled but not owned by a run: not ours to reconcile
