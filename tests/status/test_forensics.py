"""Evidence beyond the guards' stops: a user's `grpo.dev/capture` annotation captures a running job's evidence
without stopping it, once per value, whatever reconciles or operator restarts come between (the value handled is
in the status, the only memory a restarted operator has); a failed job's evidence is captured before its
RayCluster goes, with the log's NCCL lines when the failure is an NCCL or fabric one."""

from __future__ import annotations

from datetime import timedelta

from grpo_operator.api.status import EvidenceBundle, Phase, Reason
from grpo_operator.status.decision import CaptureEvidence, DeleteRayCluster, KeepLogs, StopJob
from grpo_operator.status.failures import CONTEXT_LINES, FABRIC_MAX_LINES, fabric_lines
from grpo_operator.status.forensics import MAX_BUNDLES
from grpo_operator.status.lifecycle import decide
from grpo_operator.status.observation import JobState, Seen

from tests.support.status import (
    BUNDLE,
    CUDA_OOM,
    FABRIC,
    READY,
    SID,
    T0,
    WATCHDOG,
    again,
    captures,
    failed_with,
    healthy,
    intent,
    job,
    running_job,
    spec,
)

R = Reason


def test_a_capture_request_on_a_running_run_captures_without_stopping_the_job_or_changing_its_phase() -> None:
    before = running_job()
    d = again(before.status, capture="now")
    assert captures(d) == [CaptureEvidence(SID, BUNDLE, R.CAPTURE_REQUESTED)]
    assert not d.has(StopJob) and not d.has(DeleteRayCluster)
    assert (
        (d.status.phase, d.status.reason) == (before.status.phase, before.status.reason) == (Phase.RUNNING, R.RUNNING)
    )
    assert d.status.capture_handled == "now"
    assert d.status.forensics == [
        EvidenceBundle(time="2026-11-30T12:00:30Z", trigger="CaptureRequested", submission_id=SID, config_map=BUNDLE)
    ]
    [event] = [e for e in d.events if e.reason == R.EVIDENCE_CAPTURED]
    assert BUNDLE in event.message and "grpo.dev/capture=now" in event.message and "keeps running" in event.message


def test_the_same_value_never_captures_twice_and_a_new_value_captures_again() -> None:
    first = again(running_job().status, capture="now")
    # Later reconciles, or a restarted operator: its only memory is the status it reads back.
    repeated = again(first.status, at_second=60, capture="now")
    assert captures(repeated) == [] and repeated.status.forensics == first.status.forensics
    assert repeated.status.capture_handled == "now"
    unannotated = again(repeated.status, at_second=70)  # the annotation removed: the value handled is kept
    assert unannotated.status.capture_handled == "now" and captures(unannotated) == []
    second = again(unannotated.status, at_second=90, capture="2026-12-02T04:00")
    assert captures(second) == [CaptureEvidence(SID, "x-forensics-2", R.CAPTURE_REQUESTED)]
    assert [b.config_map for b in second.status.forensics or []] == [BUNDLE, "x-forensics-2"]


def test_a_request_with_no_running_job_is_answered_with_an_event_and_not_captured_later() -> None:
    waiting = decide(None, Seen(cluster=READY), intent(evidence_config_map=BUNDLE, capture_request="now"), T0)
    assert captures(waiting) == [] and waiting.status.forensics is None
    assert waiting.status.capture_handled == "now"
    [skipped] = [e for e in waiting.events if e.reason == R.CAPTURE_SKIPPED]
    assert "grpo.dev/capture=now" in skipped.message and "no running Ray job" in skipped.message
    later = again(waiting.status, capture="now")  # the job runs now; the request was answered already
    assert captures(later) == []


def test_a_request_on_an_ended_run_captures_nothing_and_keeps_the_runs_status() -> None:
    failed = again(running_job().status, state=JobState.FAILED)
    assert failed.status.phase is Phase.FAILED
    ended = decide(failed.status, Seen(), intent(capture_request="now"), T0 + timedelta(seconds=60))
    assert captures(ended) == [] and ended.status.capture_handled == "now"
    assert ended.status.phase is Phase.FAILED and ended.status.reason == failed.status.reason
    assert R.CAPTURE_SKIPPED in [e.reason for e in ended.events]


def test_a_request_met_by_a_guards_stop_in_the_same_reconcile_is_one_capture_before_the_stop() -> None:
    s = intent(
        spec({"guards": {"stallTimeoutSeconds": 60, "startupGraceSeconds": 0}}),
        evidence_config_map=BUNDLE,
        capture_request="now",
    )
    reading = Seen(cluster=READY, job=job(JobState.RUNNING), metrics=healthy(3))
    first = decide(None, reading, intent(s.spec), T0)
    d = decide(first.status, reading, s, T0 + timedelta(seconds=100))
    assert captures(d) == [CaptureEvidence(SID, BUNDLE, R.STALLED)] and d.status.capture_handled == "now"
    assert [type(a) for a in d.actions][-2:] == [CaptureEvidence, StopJob]
    assert R.CAPTURE_SKIPPED not in [e.reason for e in d.events]  # the guard's bundle answers the request


def test_a_request_on_a_run_being_suspended_captures_before_the_job_is_stopped() -> None:
    s = intent(
        spec({"suspend": True, "storage": {"checkpointOnSuspend": False}}),
        evidence_config_map=BUNDLE,
        capture_request="now",
    )
    reading = Seen(cluster=READY, job=job(JobState.RUNNING), metrics=healthy(3))
    d = decide(running_job().status, reading, s, T0 + timedelta(seconds=30))
    assert [type(a) for a in d.actions] == [CaptureEvidence, StopJob, DeleteRayCluster]


def test_a_full_forensics_list_answers_a_request_with_an_event() -> None:
    full = [EvidenceBundle(time="t", trigger="Stalled", submission_id=SID, config_map=f"b{i}") for i in range(16)]
    prev = running_job().status.model_copy(update={"forensics": full})
    d = again(prev, capture="now")
    assert captures(d) == [] and d.status.forensics == full and len(full) == MAX_BUNDLES
    [skipped] = [e for e in d.events if e.reason == R.CAPTURE_SKIPPED]
    assert f"holds {MAX_BUNDLES} bundles" in skipped.message


def test_a_failed_job_is_captured_after_its_log_is_kept_with_the_failure_class_as_trigger() -> None:
    d = failed_with(CUDA_OOM)
    assert (d.status.phase, d.status.reason) == (Phase.FAILED, R.CUDA_OUT_OF_MEMORY)
    assert [type(a) for a in d.actions if isinstance(a, KeepLogs | CaptureEvidence)] == [KeepLogs, CaptureEvidence]
    assert captures(d) == [CaptureEvidence(SID, BUNDLE, R.CUDA_OUT_OF_MEMORY)]  # no NCCL lines for a GPU OOM
    [bundle] = d.status.forensics or []
    assert (bundle.trigger, bundle.config_map) == ("CUDAOutOfMemory", BUNDLE)
    assert R.EVIDENCE_CAPTURED in [e.reason for e in d.events]


def test_an_nccl_failure_bundle_holds_the_nccl_lines_and_is_taken_before_the_restart_remakes_the_cluster() -> None:
    hang = f"{WATCHDOG}\n{WATCHDOG.replace('pid=4711', 'pid=4712')}"  # both timed-out ranks on node-7: it is blamed
    d = failed_with(hang, patch={"recovery": {"maxRestarts": 1}}, worker_nodes=(("10.0.1.7", "node-7"),))
    assert d.status.reason == R.RESTARTING and d.status.forensics is not None
    kinds = [type(a) for a in d.actions if isinstance(a, CaptureEvidence | DeleteRayCluster)]
    assert kinds == [CaptureEvidence, DeleteRayCluster]  # the failed attempt's processes are read before they go
    [capture] = captures(d)
    assert capture.trigger == R.NCCL_TIMEOUT and dict(capture.pieces)["nccl.log"].startswith("Job entrypoint")
    assert "Watchdog caught collective operation timeout" in dict(capture.pieces)["nccl.log"]


def test_a_job_that_succeeds_or_is_stopped_outside_the_operator_leaves_no_bundle() -> None:
    for state in (JobState.SUCCEEDED, JobState.STOPPED):
        d = again(running_job().status, state=state)
        assert captures(d) == [] and d.status.forensics is None


NOISE = [f"rollout {i}: step done" for i in range(40)]


def test_the_nccl_lines_of_a_fabric_failure_keep_their_context_and_drop_the_rest() -> None:
    log = [*NOISE[:20], "node-7:412:901 [3] NCCL WARN NET/IB: bad", *NOISE[20:35], FABRIC, *NOISE[35:]]
    kept = fabric_lines("\n".join(log), R.FABRIC_ERROR).splitlines()
    assert kept == [
        *NOISE[20 - CONTEXT_LINES : 20],
        log[20],
        *NOISE[20 : 20 + CONTEXT_LINES],
        "--",
        *NOISE[35 - CONTEXT_LINES : 35],
        FABRIC,
        *NOISE[35:40],
    ]
    assert "rollout 0: step done" not in kept


def test_only_nccl_and_fabric_failures_have_nccl_lines_and_they_are_bounded() -> None:
    log = "\n".join([WATCHDOG, CUDA_OOM])
    assert fabric_lines(log, R.CUDA_OUT_OF_MEMORY) == "" and fabric_lines(log, R.NODE_LOST) == ""
    flood = "\n".join(f"\x1b[36m(pid=1)\x1b[0m NCCL INFO ring {i}" for i in range(5000))
    kept = fabric_lines(flood, R.NCCL_TIMEOUT).splitlines()
    assert len(kept) == FABRIC_MAX_LINES and kept[-1] == "(pid=1) NCCL INFO ring 4999"
