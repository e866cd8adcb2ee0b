"""status.runtime: the runtime a run was first planned against stays its runtime; a missing one keeps the run
Pending/RuntimeNotFound with the operator's message, and no child is made."""

from __future__ import annotations

from datetime import timedelta

from grpo_operator.api.status import Phase, Reason
from grpo_operator.planning.instances import DEFAULT_RUNTIME
from grpo_operator.planning.runtime import record_of
from grpo_operator.status.lifecycle import decide

from tests.status.runs import READY, T0, observe, spec

FIRST = record_of(DEFAULT_RUNTIME).model_copy(update={"name": "first", "resource_version": "7"})
LATER = FIRST.model_copy(update={"resource_version": "9"})


def test_the_first_planned_runtime_is_recorded_and_kept_when_a_later_reconcile_plans_another() -> None:
    first = decide(None, observe(runtime=FIRST), spec()).status
    assert first.runtime == FIRST
    later = decide(first, observe(cluster=READY, runtime=LATER), spec()).status
    assert later.runtime == FIRST


def test_a_missing_runtime_is_pending_runtime_not_found_with_its_message_and_no_action() -> None:
    decision = decide(None, observe(runtime_missing="GRPORuntime gone does not exist"), None)
    status = decision.status
    assert (status.phase, status.reason, status.message) == (
        Phase.PENDING,
        Reason.RUNTIME_NOT_FOUND,
        "GRPORuntime gone does not exist",
    )
    assert decision.actions == ()
    assert status.runtime is None


def test_a_reconcile_that_changes_nothing_leaves_the_status_of_a_run_with_a_runtime_as_it_was() -> None:
    """The operator writes the status only when it changed: a recorded runtime must not make the accounting see a
    change on every reconcile (one status write per reconcile of an unchanged run)."""
    first = decide(None, observe(runtime=FIRST), spec()).status
    again = decide(first, observe(now=T0 + timedelta(seconds=10), runtime=FIRST), spec()).status
    assert again == first
