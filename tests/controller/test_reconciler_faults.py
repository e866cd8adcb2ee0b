"""Faults a real cluster delivers, through a whole reconcile on FakeKube and FakeRay (tests/support/fakes.py): an
evidence bundle the API server will not store stops nothing less; a Jobs API that does not answer keeps the
phase and submits nothing; a head that answers without the job ends the attempt as a counted restart, or the run as
`Failed/HeadLost` past `recovery.maxRestarts`; an edit that cannot run, made mid-run, leaves the running attempt
alone. Each row failed on the code before this change (issue 44)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from grpo_operator.api.status import Phase, Reason
from grpo_operator.status.decision import CaptureEvidence, StopJob
from grpo_operator.status.observation import JobObservation, JobState

from tests.support.builders import merge
from tests.support.fakes import Harness, api_error, harness, running


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(api_error(403, 'configmaps "x-forensics-1" is forbidden: exceeded quota: q'), id="quota-403"),
        pytest.param(api_error(422, "ConfigMap is invalid: data: Too long"), id="refused-422"),
        pytest.param(api_error(500, "etcdserver: request timed out"), id="server-500"),
        pytest.param(api_error(403, "admission webhook denied the request"), id="webhook-403"),
    ],
)
def test_a_bundle_the_api_server_will_not_store_does_not_hold_back_the_stall_stop(error: object) -> None:
    h = harness({"guards": {"stallTimeoutSeconds": 300, "startupGraceSeconds": 0}})
    running(h, 2)
    h.kube.refuse["-forensics-"] = error  # type: ignore[assignment]
    tripped = h.step(minutes=10)  # no new rollout for 10 minutes: the stall guard trips
    actions = tripped.decision.actions if tripped.decision else ()
    assert any(isinstance(a, CaptureEvidence) for a in actions) and any(isinstance(a, StopJob) for a in actions)
    assert ("stop", tripped.status.job_submission_id) in h.ray.calls, h.ray.calls
    status = tripped.status
    assert (status.phase, status.reason) == (Phase.FAILED, Reason.STALLED), status.message
    [bundle] = status.forensics or []
    assert bundle.capture_failed is not None and str(error.reason) in bundle.capture_failed  # type: ignore[attr-defined]
    # said as a Warning event even on the reconcile that transitions to Failed (which posts no guard warnings)
    assert tripped.transitioned and any(
        r == Reason.CAPTURE_FAILED and "could not be written" in m for r, m in tripped.alerts
    ), tripped.alerts


def test_a_jobs_api_that_does_not_answer_keeps_the_phase_and_submits_nothing() -> None:
    h = harness()
    running(h, 5)
    h.ray.unavailable = "Connection refused"
    blip = h.step()
    assert (blip.status.phase, blip.status.reason) == (Phase.RUNNING, Reason.RUNNING), blip.status.message
    assert "cannot be reached (Connection refused)" in (blip.status.message or "")
    assert [s for w, s in h.ray.calls if w == "submit"] == [blip.status.job_submission_id], h.ray.calls
    h.ray.unavailable = None
    back = h.step()
    assert back.status.phase == Phase.RUNNING and back.status.attempt == 1


@pytest.mark.parametrize(
    ("max_restarts", "phase"),
    [
        pytest.param(1, Phase.PROVISIONING, id="a restart left: the run provisions again"),
        pytest.param(0, Phase.FAILED, id="no restart left: the run fails"),
    ],
)
def test_a_head_that_answers_without_the_job_ends_the_attempt_as_a_counted_restart(
    max_restarts: int, phase: Phase
) -> None:
    h = harness({"recovery": {"maxRestarts": max_restarts}})
    first = running(h, 5)
    lost = first.status.job_submission_id
    h.ray.jobs.clear()  # the head was replaced: its job table is empty
    after = h.step()
    assert after.status.phase is phase, after.status.message
    assert "has no job " + str(lost) in (after.status.message or "")
    submits = [s for w, s in h.ray.calls if w == "submit"]
    assert submits == [lost], submits  # the lost attempt is not submitted again under its own id
    if phase is Phase.FAILED:
        assert after.status.reason == Reason.HEAD_LOST
        return
    assert after.status.reason == Reason.RESTARTING and after.status.restarts == 1
    assert any(r == Reason.RESTARTED for r, _ in after.notes), after.notes
    again = h.step()
    assert again.status.attempt == 2 and again.status.job_submission_id not in (None, lost)


def _edit(h: Harness, spec: dict[str, Any]) -> None:
    """A `kubectl apply` of a changed spec: the next generation."""
    h.kube.run["spec"] = merge(h.kube.run["spec"], spec)
    h.kube.run["metadata"]["generation"] += 1


TYPO = {"extraArgs": ["--no-such-miles-flag", "1"]}  # only the operator's flag table refuses it, not the API server


def test_an_edit_that_cannot_run_leaves_the_running_attempt_alone_and_starts_no_new_one_until_fixed() -> None:
    h = harness({"recovery": {"maxRestarts": 1}})
    first = running(h, 3)
    applied = len([c for c in h.kube.calls if c[0] == "apply"])
    _edit(h, TYPO)
    refused = h.step()
    assert (refused.status.phase, refused.status.reason) == (Phase.RUNNING, Reason.RUNNING), refused.status.message
    validated = {c.type: c for c in refused.status.conditions or []}["Validated"]
    assert (validated.status, validated.reason) == ("False", Reason.INVALID_SPEC)
    assert "--no-such-miles-flag" in validated.message and validated.observed_generation == 2
    assert any(r == Reason.INVALID_SPEC and "generation 2 cannot run" in m for r, m in refused.alerts), refused.alerts
    assert len([c for c in h.kube.calls if c[0] == "apply"]) == applied  # nothing of the edit was applied
    again = h.step()
    assert not any("generation 2 cannot run" in m for _, m in again.alerts)  # said once
    # The attempt fails in a way a restart fixes: it ends, and no attempt starts from the edit.
    lost = first.status.job_submission_id or ""
    h.ray.jobs[lost] = JobObservation(lost, JobState.FAILED, "NodeLost: The node running the actor died")
    h.ray.logs_of[lost] = "ray.exceptions.ActorDiedError: The actor died because its node has died."
    h.step()
    held = h.step()
    assert held.status.phase is Phase.PROVISIONING and "not submitted" in (held.status.message or ""), held.status
    assert [s for w, s in h.ray.calls if w == "submit"] == [lost]
    # Reverted: the next attempt is submitted.
    h.kube.run["spec"].pop("extraArgs")
    h.kube.run["metadata"]["generation"] += 1
    fixed = h.step()
    assert len([s for w, s in h.ray.calls if w == "submit"]) == 2, fixed.status
    assert {c.type: c.status for c in fixed.status.conditions or []}["Validated"] == "True"


@pytest.mark.parametrize("ptrace", [False, True])
def test_the_stall_capture_reads_stacks_through_its_own_job_and_py_spy_only_where_the_runtime_grants_ptrace(
    ptrace: bool,
) -> None:
    h = harness({"guards": {"stallTimeoutSeconds": 300, "startupGraceSeconds": 0}})
    runtime = yaml.safe_load((Path(__file__).parents[2] / "examples" / "runtimes" / "aws.yaml").read_text())
    runtime["spec"]["debug"] = {"ptrace": ptrace}
    h.kube.runtimes["default"] = runtime
    running(h, 2)
    tripped = h.step(minutes=10)
    sid = tripped.status.job_submission_id
    [(captured, stacks, py_spy)] = h.ray.captures
    assert captured == sid and py_spy is ptrace
    assert stacks is not None and stacks.submission_id == f"{sid}-stacks-1"
    assert ("stop", sid) in h.ray.calls


def test_the_nodes_log_tails_come_last_in_the_bundle_so_a_full_one_leaves_them_out_first() -> None:
    h = harness({"guards": {"stallTimeoutSeconds": 300, "startupGraceSeconds": 0}})
    # Ray answers with the tails before stacks.txt: the bundle still puts them last.
    h.ray.evidence_pieces = {"logs-node-a-raylet.out": "raylet\n", "nccl-node-a-x.b64": "gA==", "stacks.txt": "s\n"}
    running(h, 2)
    h.step(minutes=10)
    [bundle] = [m for (kind, name), m in h.kube.applied.items() if kind == "ConfigMap" and "-forensics-" in name]
    pieces = [line.split(":")[0] for line in bundle["data"]["index.txt"].splitlines() if ".gz:" in line]
    assert pieces == ["job.json.gz", "stacks.txt.gz", "logs-node-a-raylet.out.gz", "nccl-node-a-x.b64.gz"], pieces
