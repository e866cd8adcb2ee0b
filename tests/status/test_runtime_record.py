"""status.runtime: the runtime a run was first planned against stays its runtime; a missing one keeps the run
Pending/RuntimeNotFound with the operator's message, and no child is made. A copy that failed its digest is said in
a RuntimeAltered Warning event; with no runtime to check the run against instead, the run is held as it is."""

from __future__ import annotations

from datetime import timedelta

from grpo_operator.api.status import ConditionType, GRPORunStatus, Phase, Reason
from grpo_operator.planning.instances import DEFAULT_RUNTIME
from grpo_operator.planning.runtime import record_of
from grpo_operator.status.intent import NoPlan
from grpo_operator.status.lifecycle import decide, unplanned
from grpo_operator.status.observation import Seen

from tests.support.status import READY, T0, intent

FIRST = record_of(DEFAULT_RUNTIME).model_copy(update={"name": "first", "resource_version": "7"})
LATER = FIRST.model_copy(update={"resource_version": "9"})


def test_the_first_planned_runtime_is_recorded_and_kept_when_a_later_reconcile_plans_another() -> None:
    first = decide(None, Seen(), intent(runtime=FIRST), T0).status
    assert first.runtime == FIRST
    later = decide(first, Seen(cluster=READY), intent(runtime=LATER), T0).status
    assert later.runtime == FIRST


def test_a_missing_runtime_is_pending_runtime_not_found_with_its_message_and_no_action() -> None:
    decision = unplanned(None, NoPlan(1, runtime_missing="GRPORuntime gone does not exist"), T0)
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
    first = decide(None, Seen(), intent(runtime=FIRST), T0).status
    again = decide(first, Seen(), intent(runtime=FIRST), T0 + timedelta(seconds=10)).status
    assert again == first
    sealed = first.model_copy(update={"runtime_digest": "hmac-sha256:" + "a" * 64})  # as the reconciler writes it
    again = decide(sealed, Seen(), intent(runtime=FIRST), T0 + timedelta(seconds=10)).status
    assert again == sealed  # the digest is carried with the copy: the status is unchanged, and not written


ALTERED = "status.runtime (the copy of GRPORuntime first ...) does not match status.runtimeDigest: it is not used"
HELD = ALTERED + ", and there is no GRPORuntime to check the run against instead: the run is not planned again"


def _running() -> GRPORunStatus:
    status = decide(None, Seen(), intent(runtime=FIRST), T0).status
    return status.model_copy(update={"phase": Phase.RUNNING, "reason": Reason.RUNNING, "job_submission_id": "grpo-x-1"})


def test_a_copy_that_failed_its_digest_with_no_runtime_to_check_against_holds_the_run_as_it_is() -> None:
    prev = _running()
    decision = unplanned(prev, NoPlan(2, runtime_missing=HELD, runtime_altered=HELD), T0)
    status = decision.status
    assert (status.phase, status.reason, status.job_submission_id) == (Phase.RUNNING, Reason.RUNNING, "grpo-x-1")
    assert status.message == HELD and status.observed_generation == 2
    validated = next(c for c in status.conditions if c.type == ConditionType.VALIDATED)
    assert (validated.status, validated.reason, validated.message) == ("False", Reason.RUNTIME_ALTERED, HELD)
    assert decision.actions == ()  # nothing applied, submitted or stopped: the job is left as it is
    assert status.runtime == prev.runtime  # kept as it was found (the reconciler never seals it)
    assert decision.alerts == [(Reason.RUNTIME_ALTERED, HELD)] and decision.warnings == []
    again = unplanned(status, NoPlan(2, runtime_missing=HELD, runtime_altered=HELD), T0 + timedelta(seconds=15))
    assert again.alerts == []  # said once, not at every reconcile while it stays held
    assert again.status.message == HELD


def test_a_terminal_run_whose_copy_failed_its_digest_is_held_too_and_keeps_its_phase() -> None:
    prev = _running().model_copy(update={"phase": Phase.SUCCEEDED, "reason": Reason.SUCCEEDED})
    decision = unplanned(prev, NoPlan(1, runtime_missing=HELD, runtime_altered=HELD), T0)
    assert (decision.status.phase, decision.status.reason) == (Phase.SUCCEEDED, Reason.SUCCEEDED)
    assert decision.actions == () and decision.alerts == [(Reason.RUNTIME_ALTERED, HELD)]


def test_a_copy_replaced_by_the_live_runtime_is_said_in_a_warning_and_the_live_one_is_recorded() -> None:
    """The reconciler passes the previous status without the copy that failed its digest: the runtime planned
    against now (the live one) is recorded instead, and the event says why."""
    prev = _running().model_copy(update={"runtime": None})
    decision = decide(prev, Seen(cluster=READY), intent(runtime=LATER, runtime_altered=ALTERED), T0)
    assert decision.status.runtime == LATER
    assert decision.alerts == [(Reason.RUNTIME_ALTERED, ALTERED)]
    validated = next(c for c in decision.status.conditions if c.type == ConditionType.VALIDATED)
    assert validated.reason == Reason.VALID


def test_an_unplanned_run_whose_runtime_is_missing_waits_without_any_alert() -> None:
    decision = unplanned(None, NoPlan(1, runtime_missing="GRPORuntime gone does not exist"), T0)
    assert decision.alerts == [] and decision.status.reason == Reason.RUNTIME_NOT_FOUND
