"""The evidence capture's stacks job, with the Jobs API played: it is submitted with no CPU and an id of its own
bundle, stopped when it still runs at the capture's deadline, and its log becomes `stacks.txt` sections, log and
flight-recorder pieces, and `missing.txt` lines for the nodes that did not answer. Without the runtime's ptrace no
py-spy request is made. What the real head and the real job do is tests/integration/operator/test_evidence.py."""

from __future__ import annotations

import base64
import json
import time
from types import SimpleNamespace
from typing import Any

from grpo_launcher import stacks as launcher_stacks
from grpo_operator.edges import stackslog
from grpo_operator.edges.rayjobs import RayJobs
from grpo_operator.render.job import stacks_job
from grpo_operator.render.settings import RenderSettings

SID = "grpo-run-1234abcd-g1"
NODE = {
    "node": "run-ray-gpu-abc-0f0f0f0f",
    "processes": [{"pid": 42, "cmdline": "python train.py", "dump": '  File "t.py", line 3 in waits_in_rollout\n'}],
    "nccl": {"nccl_trace_rank_0": base64.b64encode(b"\x80\x04pickle").decode()},
    "logs": {"raylet.out": "raylet line\n"},
    "left_out": ["logs worker-9.err (40000 bytes)"],
}
LOG = (
    "ray init lines\n"
    + launcher_stacks.MARK
    + json.dumps(NODE)
    + "\n"
    + launcher_stacks.MISSING_MARK
    + json.dumps({"node": "run-ray-gpu-def-1e1e1e1e", "why": "did not answer within 45 s"})
    + "\n"
)


def info(status: str) -> SimpleNamespace:
    return SimpleNamespace(
        job_id="02000000",
        driver_info=SimpleNamespace(node_ip_address="10.0.0.5", pid=7),
        driver_node_id="live",
        status=status,
        message="",
        start_time=0,
    )


class PlayedJobs:
    """The Jobs API: the run's job runs; the stacks job, once submitted, runs until stopped (`ends`: or ends)."""

    def __init__(self, ends: bool) -> None:
        self.ends = ends
        self.submitted: list[dict[str, Any]] = []
        self.stopped: list[str] = []

    def get_job_info(self, sid: str) -> SimpleNamespace:
        if sid == SID:
            return info("RUNNING")
        if not self.submitted:
            raise RuntimeError(f"Job {sid} does not exist")
        return info("STOPPED" if self.stopped else "SUCCEEDED" if self.ends else "RUNNING")

    def submit_job(self, **kwargs: Any) -> str:
        self.submitted.append(kwargs)
        return str(kwargs["submission_id"])

    def stop_job(self, sid: str) -> bool:
        self.stopped.append(sid)
        return True

    def get_job_logs(self, sid: str) -> str:
        return LOG


class PlayedRay(RayJobs):
    def __init__(self, jobs: PlayedJobs) -> None:
        super().__init__("http://head:8265", "token")
        self.jobs = jobs
        self.paths: list[str] = []

    def _client(self) -> Any:
        return self.jobs

    def _get(self, path: str, params: dict[str, str], timeout: float = 30.0) -> Any:
        self.paths.append(path)
        return SimpleNamespace(ok=True, status_code=200, text='{"data": {"result": []}}', json=lambda: {})


def job(budget: float) -> Any:
    return stacks_job(SID, "run-forensics-3", budget, RenderSettings(python="/venv/bin/python"))


def test_the_stacks_job_becomes_sections_pieces_and_the_nodes_that_did_not_answer() -> None:
    jobs = PlayedJobs(ends=True)
    ray = PlayedRay(jobs)
    pieces = ray.evidence(SID, budget_seconds=30.0, stacks=job(30.0))
    [sent] = jobs.submitted
    assert sent["submission_id"] == f"{SID}-stacks-3" and sent["entrypoint_num_cpus"] == 0
    assert sent["entrypoint"].startswith("/venv/bin/python -m grpo_launcher.stacks --dir /tmp/grpo-stacks --seconds 15")
    assert sent["runtime_env"]["env_vars"]["GRPO_STACKS_DIR"] == ""  # the job's own processes register nothing
    assert "== run-ray-gpu-abc-0f0f0f0f pid 42: python train.py\n" in pieces["stacks.txt"]
    assert "waits_in_rollout" in pieces["stacks.txt"]
    assert pieces["logs-run-ray-gpu-abc-0f0f0f0f-raylet.out"] == "raylet line\n"
    encoded = pieces["nccl-run-ray-gpu-abc-0f0f0f0f-nccl_trace_rank_0.b64"]
    assert base64.b64decode(encoded) == b"\x80\x04pickle"
    assert pieces["missing.txt"].splitlines() == [
        "run-ray-gpu-abc-0f0f0f0f logs worker-9.err (40000 bytes): over the node's share of the bundle",
        "node run-ray-gpu-def-1e1e1e1e: did not answer within 45 s",
    ]
    assert not jobs.stopped and "/worker/traceback" not in ray.paths  # no ptrace granted: no py-spy request


def test_a_stacks_job_still_running_at_the_deadline_is_stopped_and_the_capture_ends_by_its_budget() -> None:
    jobs = PlayedJobs(ends=False)
    began = time.monotonic()
    pieces = PlayedRay(jobs).evidence(SID, budget_seconds=5.0, stacks=job(5.0))
    assert time.monotonic() - began < 5.0 + 1.0  # the product's promise: the stop after it waits no longer
    assert jobs.stopped == [f"{SID}-stacks-3"]
    assert "stacks job: the stacks job ended STOPPED after 2 node(s) reported" in pieces["missing.txt"]


def test_with_ptrace_granted_the_driver_is_also_dumped_through_py_spy() -> None:
    ray = PlayedRay(PlayedJobs(ends=True))
    ray.evidence(SID, budget_seconds=30.0, stacks=job(30.0), py_spy=True)
    assert "/worker/traceback" in ray.paths


def test_the_operator_reads_the_marks_the_launcher_prints() -> None:
    assert (stackslog.MARK, stackslog.MISSING_MARK) == (launcher_stacks.MARK, launcher_stacks.MISSING_MARK)


def test_a_cut_line_and_a_failed_job_are_named_not_raised() -> None:
    read = stackslog.StacksRead(
        "FAILED", "", "Traceback...\nModuleNotFoundError: grpo_launcher\n" + stackslog.MARK + "{"
    )
    found = stackslog.stacks_pieces(read)
    assert found.stacks == [] and found.pieces == {}
    assert found.missing[0] == ("stacks job", "a node's line is not a JSON object (cut short?)")
    assert found.missing[1][0] == "stacks job" and "ModuleNotFoundError: grpo_launcher" in found.missing[1][1]


def test_a_node_with_no_hooked_process_says_so_and_keys_are_configmap_keys() -> None:
    line = stackslog.MARK + json.dumps({"node": "a b/c", "processes": [], "nccl": {}, "logs": {"x:y": "t"}})
    found = stackslog.stacks_pieces(stackslog.StacksRead("SUCCEEDED", "", line))
    assert found.stacks[0].startswith("== a b/c: no process there has the stacks hook")
    assert list(found.pieces) == ["logs-a_b_c-x_y"]
