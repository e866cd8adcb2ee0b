"""The reward service's children as the service, the client and the disruption controller read them: the
deadline the user sets is the one the service enforces and the client waits for, its floor can verify a
simple answer, and the PodDisruptionBudget never blocks a node drain."""

from __future__ import annotations

import pytest
from grpo_launcher.reward_client import Policy
from grpo_operator.cli.loading import parse_run
from reward_service.settings import RewardSettings

from tests.support.builders import example, kind, rendered


def remote(replicas: int = 1, timeout_s: float = 7.5) -> dict[str, object]:
    return {"reward": {"type": "remote", "remote": {"replicas": replicas, "timeoutSeconds": timeout_s}}}


def _service_env(doc: dict[str, object]) -> dict[str, str]:
    container = kind(rendered(doc), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


@pytest.mark.parametrize("timeout_s", [5, 7.5, 12.5, 600])
def test_the_service_enforces_the_deadline_the_user_set_and_the_client_waits_for_it(timeout_s: float) -> None:
    doc = example("quickstart", remote(timeout_s=timeout_s))
    settings = RewardSettings.model_validate(
        {k.removeprefix("REWARD_").lower(): v for k, v in _service_env(doc).items()}
    )
    assert settings.hard_deadline_s == timeout_s  # the worker is killed at this deadline
    client = Policy.from_env(rendered(doc).job.runtime_env["env_vars"])
    assert client.timeout_s == 2 * timeout_s + 5  # the client's attempt outlasts one queued item


@pytest.mark.parametrize("timeout_s", [1e-9, 1, 4.999])
def test_a_deadline_too_short_to_verify_a_simple_answer_is_refused_naming_the_field(timeout_s: float) -> None:
    run, problems = parse_run(example("quickstart", remote(timeout_s=timeout_s)))
    assert run is None
    assert any("timeoutSeconds" in str(p) and "5" in str(p) for p in problems), [str(p) for p in problems]


def _disruptions_allowed(pdb: dict[str, object], replicas: int) -> int:
    """The disruption controller's arithmetic for a Deployment's pods, all healthy (kubernetes v1.31
    pkg/controller/disruption/disruption.go getExpectedPodCount / updatePdbStatus: desiredHealthy is
    minAvailable, or expected - maxUnavailable; disruptionsAllowed = currentHealthy - desiredHealthy)."""
    spec = pdb["spec"]
    assert isinstance(spec, dict)
    desired = max(0, replicas - int(spec["maxUnavailable"])) if "maxUnavailable" in spec else int(spec["minAvailable"])
    return max(0, replicas - desired)


@pytest.mark.parametrize("replicas", [1, 2, 3, 8])
def test_a_node_drain_can_evict_one_scorer_at_a_time_whatever_the_replicas(replicas: int) -> None:
    pdb = kind(rendered(example("quickstart", remote(replicas=replicas))), "PodDisruptionBudget")
    assert _disruptions_allowed(pdb, replicas) == 1
