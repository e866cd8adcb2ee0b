"""Evidence beyond the guards' stops: a user's `grpo.dev/capture` annotation captures a running job's evidence
without stopping it, once per value, whatever reconciles or operator restarts come between (the value handled is
in the status, the only memory a restarted operator has); a failed job's evidence is captured before its
RayCluster goes, with the log's NCCL lines when the failure is an NCCL or fabric one."""

from __future__ import annotations

from datetime import timedelta

from grpo_operator.api.status import EvidenceBundle, GRPORunStatus, Phase, Reason
from grpo_operator.status.decision import CaptureEvidence, Decision, DeleteRayCluster, KeepLogs, StopJob
from grpo_operator.status.failures import CONTEXT_LINES, FABRIC_MAX_LINES, fabric_lines
from grpo_operator.status.forensics import MAX_BUNDLES
from grpo_operator.status.lifecycle import decide
from grpo_operator.status.observation import JobState

from tests.status.runs import READY, SID, T0, healthy, job, observe, spec
from tests.status.test_completion import LOGS
from tests.status.test_failures import CUDA_OOM, WATCHDOG
from tests.status.test_recovery import FABRIC, FAILED_WITH

R = Reason
BUNDLE = "x-forensics-1"


def _running(**kw: object) -> Decision:
    return decide(None, observe(cluster=READY, job=job(JobState.RUNNING), metrics=healthy(3)), spec(kw or None))


def _again(prev: GRPORunStatus, at: int = 30, state: JobState = JobState.RUNNING, **kw: object) -> Decision:
    kw.setdefault("evidence_config_map", f"x-forensics-{len(prev.forensics or []) + 1}")
    obs = observe(now=T0 + timedelta(seconds=at), cluster=READY, job=job(state), metrics=healthy(3), **kw)
    return decide(prev, obs, spec())


def _captures(d: Decision) -> list[CaptureEvidence]:
    return [a for a in d.actions if isinstance(a, CaptureEvidence)]


def test_a_capture_request_on_a_running_run_captures_without_stopping_the_job_or_changing_its_phase() -> None:
    before = _running()
    d = _again(before.status, capture_request="now")
    assert _captures(d) == [CaptureEvidence(SID, BUNDLE, R.CAPTURE_REQUESTED)]
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
    first = _again(_running().status, capture_request="now")
    # Later reconciles, or a restarted operator: its only memory is the status it reads back.
    again = _again(first.status, at=60, capture_request="now")
    assert _captures(again) == [] and again.status.forensics == first.status.forensics
    assert again.status.capture_handled == "now"
    unannotated = _again(again.status, at=70)  # the annotation removed: the value handled is kept
    assert unannotated.status.capture_handled == "now" and _captures(unannotated) == []
    second = _again(unannotated.status, at=90, capture_request="2026-12-02T04:00")
    assert _captures(second) == [CaptureEvidence(SID, "x-forensics-2", R.CAPTURE_REQUESTED)]
    assert [b.config_map for b in second.status.forensics or []] == [BUNDLE, "x-forensics-2"]


def test_a_request_with_no_running_job_is_answered_with_an_event_and_not_captured_later() -> None:
    waiting = decide(None, observe(cluster=READY, evidence_config_map=BUNDLE, capture_request="now"), spec())
    assert _captures(waiting) == [] and waiting.status.forensics is None
    assert waiting.status.capture_handled == "now"
    [skipped] = [e for e in waiting.events if e.reason == R.CAPTURE_SKIPPED]
    assert "grpo.dev/capture=now" in skipped.message and "no running Ray job" in skipped.message
    later = _again(waiting.status, capture_request="now")  # the job runs now; the request was answered already
    assert _captures(later) == []


def test_a_request_on_an_ended_run_captures_nothing_and_keeps_the_runs_status() -> None:
    failed = _again(_running().status, state=JobState.FAILED)
    assert failed.status.phase is Phase.FAILED
    ended = decide(failed.status, observe(now=T0 + timedelta(seconds=60), capture_request="now"), spec())
    assert _captures(ended) == [] and ended.status.capture_handled == "now"
    assert ended.status.phase is Phase.FAILED and ended.status.reason == failed.status.reason
    assert R.CAPTURE_SKIPPED in [e.reason for e in ended.events]


def test_a_request_met_by_a_guards_stop_in_the_same_reconcile_is_one_capture_before_the_stop() -> None:
    s = spec({"guards": {"stallTimeoutSeconds": 60, "startupGraceSeconds": 0}})
    seen = decide(None, observe(cluster=READY, job=job(JobState.RUNNING), metrics=healthy(3)), s)
    later = observe(
        now=T0 + timedelta(seconds=100),
        cluster=READY,
        job=job(JobState.RUNNING),
        metrics=healthy(3),
        evidence_config_map=BUNDLE,
        capture_request="now",
    )
    d = decide(seen.status, later, s)
    assert _captures(d) == [CaptureEvidence(SID, BUNDLE, R.STALLED)] and d.status.capture_handled == "now"
    assert [type(a) for a in d.actions][-2:] == [CaptureEvidence, StopJob]
    assert R.CAPTURE_SKIPPED not in [e.reason for e in d.events]  # the guard's bundle answers the request


def test_a_request_on_a_run_being_suspended_captures_before_the_job_is_stopped() -> None:
    s = spec({"suspend": True, "storage": {"checkpointOnSuspend": False}})
    obs = observe(
        now=T0 + timedelta(seconds=30),
        cluster=READY,
        job=job(JobState.RUNNING),
        metrics=healthy(3),
        suspend=True,
        evidence_config_map=BUNDLE,
        capture_request="now",
    )
    d = decide(_running().status, obs, s)
    assert [type(a) for a in d.actions] == [CaptureEvidence, StopJob, DeleteRayCluster]


def test_a_full_forensics_list_answers_a_request_with_an_event() -> None:
    full = [EvidenceBundle(time="t", trigger="Stalled", submission_id=SID, config_map=f"b{i}") for i in range(16)]
    prev = _running().status.model_copy(update={"forensics": full})
    d = _again(prev, capture_request="now")
    assert _captures(d) == [] and d.status.forensics == full and len(full) == MAX_BUNDLES
    [skipped] = [e for e in d.events if e.reason == R.CAPTURE_SKIPPED]
    assert f"holds {MAX_BUNDLES} bundles" in skipped.message


def _failed(line: str, **kw: object) -> Decision:
    s = spec(kw.pop("patch", None))  # type: ignore[arg-type]
    running = decide(None, observe(cluster=READY, job=job(JobState.RUNNING), metrics=healthy(3)), s)
    obs = observe(
        now=T0 + timedelta(seconds=30),
        cluster=READY,
        job=job(JobState.FAILED, FAILED_WITH + line),
        logs=LOGS,
        evidence_config_map=BUNDLE,
        **kw,
    )
    return decide(running.status, obs, s)


def test_a_failed_job_is_captured_after_its_log_is_kept_with_the_failure_class_as_trigger() -> None:
    d = _failed(CUDA_OOM)
    assert (d.status.phase, d.status.reason) == (Phase.FAILED, R.CUDA_OUT_OF_MEMORY)
    assert [type(a) for a in d.actions if isinstance(a, KeepLogs | CaptureEvidence)] == [KeepLogs, CaptureEvidence]
    assert _captures(d) == [CaptureEvidence(SID, BUNDLE, R.CUDA_OUT_OF_MEMORY)]  # no NCCL lines for a GPU OOM
    [bundle] = d.status.forensics or []
    assert (bundle.trigger, bundle.config_map) == ("CUDAOutOfMemory", BUNDLE)
    assert R.EVIDENCE_CAPTURED in [e.reason for e in d.events]


def test_an_nccl_failure_bundle_holds_the_nccl_lines_and_is_taken_before_the_restart_remakes_the_cluster() -> None:
    hang = f"{WATCHDOG}\n{WATCHDOG.replace('pid=4711', 'pid=4712')}"  # both timed-out ranks on node-7: it is blamed
    d = _failed(hang, patch={"recovery": {"maxRestarts": 1}}, worker_nodes=(("10.0.1.7", "node-7"),))
    assert d.status.reason == R.RESTARTING and d.status.forensics is not None
    kinds = [type(a) for a in d.actions if isinstance(a, CaptureEvidence | DeleteRayCluster)]
    assert kinds == [CaptureEvidence, DeleteRayCluster]  # the failed attempt's processes are read before they go
    [capture] = _captures(d)
    assert capture.trigger == R.NCCL_TIMEOUT and dict(capture.pieces)["nccl.log"].startswith("Job entrypoint")
    assert "Watchdog caught collective operation timeout" in dict(capture.pieces)["nccl.log"]


def test_a_job_that_succeeds_or_is_stopped_outside_the_operator_leaves_no_bundle() -> None:
    for state in (JobState.SUCCEEDED, JobState.STOPPED):
        d = _again(_running().status, state=state)
        assert _captures(d) == [] and d.status.forensics is None


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
