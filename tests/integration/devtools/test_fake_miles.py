"""The miles test double, run the way the operator runs miles: a real Ray job on the local head, with the
rendered miles argv, serving miles-format gauges, ending SUCCEEDED, FAILED with its message, or STOPPED.
A few behaviours of the double itself (flag parsing, checkpoints) run it as a plain process."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

from grpo_dev import fake_miles
from grpo_dev.localray import LocalRayHead
from prometheus_client.parser import text_string_to_metric_families
from ray.job_submission import JobStatus, JobSubmissionClient

from tests.support.operator_harness import wait_for

FAKE = Path(fake_miles.__file__)
TERMINAL = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}
MILES_PREFIX = ["python3", "/root/miles/train.py"]
# Real miles flags the double must ignore (a sample of what render/job.py emits).
OTHER_MILES_FLAGS = [
    "--hf-checkpoint",
    "/fsx/models/Qwen3-4B",
    "--rm-type",
    "remote_rm",
    "--rm-url",
    "http://reward:8000/score",
    "--eval-prompt-data",
    "aime",
    "/fsx/data/aime.jsonl",
    "--rollout-temperature",
    "1.0",
    "--use-tensorboard",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def miles_argv(run_name: str, port: int, rollouts: int, *knobs: str) -> list[str]:
    return [
        *MILES_PREFIX,
        *OTHER_MILES_FLAGS,
        "--num-rollout",
        str(rollouts),
        "--use-prometheus",
        "--prometheus-port",
        str(port),
        "--prometheus-run-name",
        run_name,
        *knobs,
    ]


def submit(client: JobSubmissionClient, run_name: str, port: int, rollouts: int, *knobs: str) -> str:
    entrypoint = shlex.join([sys.executable, str(FAKE), *miles_argv(run_name, port, rollouts, *knobs)])
    return client.submit_job(entrypoint=entrypoint, entrypoint_resources={"gpu_node": 0.001})


def scrape(port: int) -> dict[str, tuple[dict[str, str], float]]:
    """miles_metric_* samples at 127.0.0.1:port, or {} while nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as reply:
            text = reply.read().decode()
    except OSError:
        return {}
    return {
        sample.name: (sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("miles_metric_")
    }


def answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2):
            return True
    except OSError:
        return False


def final_status(client: JobSubmissionClient, job: str) -> JobStatus:
    status: JobStatus = wait_for(f"job {job} to end", lambda: (s := client.get_job_status(job)) in TERMINAL and s)
    return status


def test_fake_serves_miles_gauges_per_rollout_then_succeeds_with_exit_0(ray_head: LocalRayHead) -> None:
    client = JobSubmissionClient(ray_head.dashboard_url, headers=ray_head.auth_headers)
    port, run = free_port(), f"happy-{uuid.uuid4().hex[:6]}"
    job = submit(
        client,
        run,
        port,
        3,
        "--fake-step-seconds",
        "0.2",
        "--fake-reward",
        "0.1,0.2,0.3",
        "--fake-repetition",
        "0.05",
        "--fake-truncated",
        "0.5",
    )

    metrics = wait_for(
        "rollout 2 on /metrics", lambda: (m := scrape(port)) and m["miles_metric_rollout_step"][1] == 2 and m
    )
    assert metrics["miles_metric_rollout_step"] == ({"run_name": run}, 2.0)
    assert metrics["miles_metric_rollout_raw_reward"] == ({"run_name": run}, 0.3)
    assert metrics["miles_metric_rollout_repetition_frac"] == ({"run_name": run}, 0.05)
    assert metrics["miles_metric_rollout_truncated_ratio"] == ({"run_name": run}, 0.5)
    assert metrics["miles_metric_perf_step_time"][1] > 0
    info = client.get_job_info(job)
    assert info.driver_info is not None and info.driver_info.node_ip_address == "127.0.0.1"

    assert final_status(client, job) == JobStatus.SUCCEEDED
    assert client.get_job_info(job).driver_exit_code == 0
    assert scrape(port) == {} and not answers(port)  # like miles's collector actor: gone with the job, no linger
    logs = client.get_job_logs(job)
    for rollout_id, reward in enumerate((0.1, 0.2, 0.3)):
        assert f"rollout {rollout_id}: {{'rollout/raw_reward': {reward}," in logs


def test_fake_fails_with_its_message_as_the_last_log_line(ray_head: LocalRayHead) -> None:
    client = JobSubmissionClient(ray_head.dashboard_url, headers=ray_head.auth_headers)
    message = "preflight failed: gpus: expected 8 visible GPUs, found 0"
    job = submit(
        client,
        f"doomed-{uuid.uuid4().hex[:6]}",
        free_port(),
        5,
        "--fake-fail-after",
        "0",
        "--fake-exit-code",
        "3",
        "--fake-fail-message",
        message,
    )

    assert final_status(client, job) == JobStatus.FAILED
    info = client.get_job_info(job)
    assert info.driver_exit_code == 3
    assert message in (info.message or "")
    assert client.get_job_logs(job).rstrip().splitlines()[-1] == message


def test_stop_job_stops_a_stalled_fake_and_its_process(ray_head: LocalRayHead) -> None:
    client = JobSubmissionClient(ray_head.dashboard_url, headers=ray_head.auth_headers)
    port, run = free_port(), f"stalled-{uuid.uuid4().hex}"
    job = submit(client, run, port, 10, "--fake-step-seconds", "0.1", "--fake-stall-after", "1")
    wait_for("the stall", lambda: "stalled before rollout 1" in client.get_job_logs(job))
    assert scrape(port)["miles_metric_rollout_step"][1] == 0
    assert client.get_job_status(job) == JobStatus.RUNNING

    client.stop_job(job)
    assert final_status(client, job) == JobStatus.STOPPED
    ps = subprocess.run(["ps", "-ww", "-eo", "stat=,args="], capture_output=True, text=True, check=True).stdout
    assert [ln for ln in ps.splitlines() if run in ln and not ln.startswith("Z")] == []
    assert scrape(port) == {}


# ---- the double as a plain process ----------------------------------------------------------------------


def run_fake(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(FAKE), *argv], capture_output=True, text=True, timeout=60, check=False)


def rollouts_in(output: str) -> list[int]:
    return [
        int(line.split(" rollout ", 1)[1].split(":")[0])
        for line in output.splitlines()
        if " rollout " in line and "}" in line
    ]


def test_fake_serves_no_gauge_before_its_first_rollout(ray_head: LocalRayHead) -> None:
    client = JobSubmissionClient(ray_head.dashboard_url, headers=ray_head.auth_headers)
    port, run = free_port(), f"slow-{uuid.uuid4().hex[:6]}"
    job = submit(client, run, port, 2, "--fake-step-seconds", "30")
    wait_for("the endpoint", lambda: answers(port))
    assert scrape(port) == {}  # miles creates a gauge only when a key is first logged (prometheus_utils.py:100)
    client.stop_job(job)
    assert final_status(client, job) == JobStatus.STOPPED


def test_fake_reads_miles_flags_after_a_launcher_double_dash() -> None:
    done = run_fake(
        "-m",
        "grpo_launcher",
        "run",
        "--config",
        "/etc/grpo/run.json",
        "--",
        *MILES_PREFIX,
        *OTHER_MILES_FLAGS,
        "--num-rollout",
        "2",
        "--fake-step-seconds",
        "0",
    )
    assert done.returncode == 0, done.stderr
    assert rollouts_in(done.stderr) == [0, 1]


def test_fake_without_num_rollout_says_so() -> None:
    done = run_fake(*MILES_PREFIX, "--num-epoch", "1")
    assert done.returncode == 2
    assert "--num-rollout is required" in done.stderr


def test_fake_checkpoints_resume_after_the_last_saved_rollout(tmp_path: Path) -> None:
    ckpt = tmp_path / "checkpoints"
    flags = [
        *MILES_PREFIX,
        "--load",
        str(ckpt),
        "--save",
        str(ckpt),
        "--save-interval",
        "2",
        "--save-trigger-sentinel",
        str(tmp_path / "save-now"),
        "--fake-step-seconds",
        "0",
        "--fake-checkpoints",
    ]
    first = run_fake(*flags, "--num-rollout", "3", "--fake-fail-after", "2", "--fake-exit-code", "1")
    assert first.returncode == 1
    assert rollouts_in(first.stderr) == [0, 1]
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "1"  # (1 + 1) % 2 == 0

    (tmp_path / "save-now").touch()
    second = run_fake(*flags, "--num-rollout", "3")
    assert second.returncode == 0, second.stderr
    assert rollouts_in(second.stderr) == [2]
    assert "(sentinel)" in second.stderr
    assert not (tmp_path / "save-now").exists()
    assert sorted(p.name for p in ckpt.glob("iter_*")) == ["iter_0000001", "iter_0000002"]


def test_fake_takes_per_run_knobs_from_the_knobs_dir_by_run_name(tmp_path: Path) -> None:
    # spec.extraArgs takes only miles's own flags, so the harness leaves a run's knobs in a file named after it.
    (tmp_path / "knobbed.json").write_text('["--fake-fail-after", "1", "--fake-exit-code", "3"]')
    argv = [*MILES_PREFIX, "--num-rollout", "3", "--fake-step-seconds", "0", "--fake-knobs-dir", str(tmp_path)]
    knobbed = run_fake(*argv, "--prometheus-run-name", "knobbed")
    other = run_fake(*argv, "--prometheus-run-name", "other")
    assert (knobbed.returncode, rollouts_in(knobbed.stderr)) == (3, [0])
    assert (other.returncode, rollouts_in(other.stderr)) == (0, [0, 1, 2])


RM_PROBE = """
import json, os
async def reward(args, samples):
    with open(os.environ["RM_PROBE_OUT"], "a") as out:
        out.write(json.dumps([args.rm_url, [[s.prompt, s.response, s.label] for s in samples]]) + "\\n")
    return [1.0 if "boxed{" + s.label + "}" in s.response else 0.0 for s in samples]
"""


def test_fake_scores_a_group_per_rollout_through_the_custom_rm_path_only_when_asked(tmp_path: Path) -> None:
    (tmp_path / "rm_probe.py").write_text(RM_PROBE)
    out = tmp_path / "calls.jsonl"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env["RM_PROBE_OUT"] = str(out)
    argv = [sys.executable, str(FAKE), "--num-rollout", "2", "--fake-step-seconds", "0", "--n-samples-per-prompt", "2"]
    argv += ["--custom-rm-path", "rm_probe.reward", "--rm-url", "http://reward.example/score"]
    quiet = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, env=env)
    assert quiet.returncode == 0 and not out.exists(), quiet.stderr
    scored = subprocess.run(
        [*argv, "--fake-score-rewards"], capture_output=True, text=True, timeout=60, check=False, env=env
    )
    assert scored.returncode == 0, scored.stderr
    calls = [json.loads(line) for line in out.read_text().splitlines()]
    assert [url for url, _ in calls] == ["http://reward.example/score"] * 2
    assert all(len(samples) == 2 for _, samples in calls)
    assert "reward 0: [1.0, 0.0] from http://reward.example/score" in scored.stderr
