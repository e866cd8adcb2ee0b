"""What a failed run tells its user, at the edges: the Failed message (what failed, on which node, then the line),
the NCCL lines of a fabric failure laid out as `grep -C 5` prints them (docs/troubleshooting.md's "5 lines of context"), a
signature line kept though it does not name NCCL, a full `status.forensics` kept as it is when the job fails, and
a capture request answered with an event while the run's bundle name is not known."""

from __future__ import annotations

from datetime import timedelta

from grpo_operator.api.status import EvidenceBundle, Phase, Reason
from grpo_operator.status.decision import CaptureEvidence
from grpo_operator.status.failures import fabric_lines
from grpo_operator.status.lifecycle import decide
from grpo_operator.status.observation import JobState, Seen

from tests.support.status import (
    BUNDLE,
    CUDA_OOM,
    READY,
    SID,
    T0,
    captures,
    failed_with,
    healthy,
    intent,
    job,
    running_job,
)

R = Reason


def test_a_failed_runs_message_says_what_failed_on_which_node_then_the_line_that_showed_it() -> None:
    d = failed_with(CUDA_OOM)
    assert (d.status.phase, d.status.reason) == (Phase.FAILED, R.CUDA_OUT_OF_MEMORY)
    assert d.status.message is not None
    assert d.status.message.startswith(f"a GPU ran out of memory on node 10.0.1.8: {CUDA_OOM}")


LOG = [f"step {i}: loss 0.1" for i in range(31)]


def test_the_nccl_lines_are_laid_out_as_grep_c_5_prints_them() -> None:
    """NCCL lines at 10, 13 and 25: the first two groups overlap (one group, no line twice); the third begins two
    lines after the second ends, so one line is left out between them and `--` marks it."""
    log = list(LOG)
    for i in (10, 13, 25):
        log[i] = f"node-7:412:901 [3] NCCL INFO channel {i}"
    kept = fabric_lines("\n".join(log), R.NCCL_TIMEOUT).splitlines()
    assert kept == [*log[5:19], "--", *log[20:31]]


def test_a_fabric_failures_own_line_is_kept_when_it_does_not_name_nccl() -> None:
    """Ray's job message keeps the last 20,000 characters of the log: the head of torch's `NCCL error in:` message
    can be cut off, leaving its `Last error:` line; that line is the evidence, 10 lines from any NCCL word."""
    ib = "NET/IB: Got completion from peer 10.0.1.8<41234> with status=12 opcode=0 len=0 vendor err 129"
    log = [*LOG[:15], "Last error:", ib, *LOG[15:]]
    kept = fabric_lines("\n".join(log), R.FABRIC_ERROR).splitlines()
    assert kept == log[11:22]


def test_a_job_failing_when_status_forensics_is_full_keeps_the_list_and_captures_no_more() -> None:
    full = [EvidenceBundle(time="t", trigger="Stalled", submission_id=SID, config_map=f"b{i}") for i in range(16)]
    s = intent(evidence_config_map="x-forensics-17")
    running = decide(None, Seen(cluster=READY, job=job(JobState.RUNNING), metrics=healthy(3)), s, T0)
    prev = running.status.model_copy(update={"forensics": full})
    d = decide(prev, Seen(cluster=READY, job=job(JobState.FAILED, "exit code 1")), s, T0 + timedelta(seconds=30))
    assert d.status.phase is Phase.FAILED
    assert captures(d) == [] and d.status.forensics == full
    assert R.EVIDENCE_CAPTURED not in [e.reason for e in d.events]


def test_a_capture_request_before_the_runs_bundle_name_is_known_is_answered_with_an_event() -> None:
    want = intent(capture_request="now", evidence_config_map="")
    d = decide(running_job().status, Seen(cluster=READY, job=job(JobState.RUNNING), metrics=healthy(3)), want, T0)
    assert captures(d) == [] and d.status.forensics is None
    assert d.status.capture_handled == "now" and d.status.phase is Phase.RUNNING
    [skipped] = [e for e in d.events if e.reason == R.CAPTURE_SKIPPED]
    assert skipped.message == "grpo.dev/capture=now: nothing captured, the run's bundle name is not known yet"
    assert not any(isinstance(a, CaptureEvidence) for a in d.actions) and BUNDLE not in skipped.message
