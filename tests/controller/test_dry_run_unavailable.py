"""A dry run of a child the API server cannot answer (5xx, 429) is `Unavailable`, never a verdict and never an
exception that leaves the status empty (issue #46): the run is Pending/APIServerUnavailable (or keeps its phase)
with the child and the server's words in its message, and its next timer tick waits for its backoff. The real API
server's 500 is in tests/integration/operator/test_dry_run_unavailable.py. Pure."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from grpo_operator.api.status import GRPORunStatus, Phase, Reason
from grpo_operator.controller.children import Pacing
from grpo_operator.controller.config import OperatorSettings
from grpo_operator.edges.backoff import Backoff, dry_run_key
from grpo_operator.edges.errors import Unavailable
from grpo_operator.edges.kube import dry_run_unavailable
from grpo_operator.status.intent import NoPlan
from grpo_operator.status.lifecycle import unplanned

from tests.support.fakes import api_error

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SAID = "the API server answered 500 to the dry run of RayCluster r: Internal error occurred: failed calling webhook"


@pytest.mark.parametrize(
    ("status", "unavailable"),
    [
        pytest.param(500, True, id="internal-error"),
        pytest.param(503, True, id="unavailable"),
        pytest.param(504, True, id="timeout"),
        pytest.param(429, True, id="too-many-requests"),
        pytest.param(400, False, id="bad-request-is-a-refusal"),
        pytest.param(422, False, id="invalid-is-a-refusal"),
        pytest.param(403, False, id="forbidden-is-skipped"),
    ],
)
def test_a_dry_run_the_server_cannot_answer_is_unavailable_naming_the_child(status: int, unavailable: bool) -> None:
    found = dry_run_unavailable("RayCluster r", api_error(status, "Internal error occurred: failed calling webhook"))
    assert isinstance(found, Unavailable) == unavailable
    if found is not None:
        assert str(found).startswith(f"the API server answered {status} to the dry run of RayCluster r: Internal")
        assert str(found).endswith("the check is tried again at the next reconcile")


def test_a_new_run_is_pending_with_the_servers_words_and_nothing_is_done() -> None:
    decision = unplanned(None, NoPlan(1, api_unavailable=SAID), NOW)
    assert (decision.status.phase, decision.status.reason, decision.status.message) == (
        Phase.PENDING,
        Reason.API_SERVER_UNAVAILABLE,
        SAID,
    )
    assert decision.actions == ()


def test_a_run_with_a_phase_keeps_it_and_says_why_in_its_message() -> None:
    prev = GRPORunStatus(phase=Phase.PROVISIONING, reason=Reason.PROVISIONING, observed_generation=1)
    decision = unplanned(prev, NoPlan(1, api_unavailable=SAID), NOW)
    assert (decision.status.phase, decision.status.reason, decision.status.message) == (
        Phase.PROVISIONING,
        Reason.PROVISIONING,
        SAID,
    )
    assert decision.actions == ()


class _Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


class _Cache:
    def known_token(self, namespace: str, run: str) -> str | None:
        return None


def test_the_timer_retries_such_a_run_when_its_backoff_ends() -> None:
    clock = _Clock()
    settings = OperatorSettings(ray_address="http://127.0.0.1:1", reconcile_interval_seconds=15)
    api = Backoff(first=15, most=60, clock=clock)
    pacing = Pacing(settings, _Cache(), Backoff(clock=clock), clock=clock, api_backoff=api)  # type: ignore[arg-type]
    body: dict[str, Any] = {
        "metadata": {"namespace": "ns", "name": "r"},
        "status": {"phase": "Pending", "reason": "APIServerUnavailable"},
    }
    pacing.reconciled("ns", "r")
    api.failed(dry_run_key("ns", "r"), SAID)
    clock.now += 14
    assert not pacing.due(body)
    clock.now += 1
    assert pacing.due(body)
