"""What the evidence capture reads in a Ray pod: every run's pods carry the stacks hook's directory and torch's
NCCL flight recorder, which need no capability; py-spy (SYS_PTRACE and the dashboard's profiling) only where the
run's GRPORuntime grants `spec.debug.ptrace` (docs/SECURITY.md)."""

from __future__ import annotations

from typing import Any

import pytest
from grpo_operator.render.job import stacks_job

from tests.support.builders import SETTINGS, example, kind, rendered
from tests.support.runtimes import rendered_on, small_runtime


def _ray_containers(cluster: dict[str, Any]) -> list[dict[str, Any]]:
    spec = cluster["spec"]
    head = spec["headGroupSpec"]["template"]["spec"]["containers"]
    workers = [c for g in spec["workerGroupSpecs"] for c in g["template"]["spec"]["containers"]]
    return head + workers


def _with_runtime(debug: dict[str, Any] | None) -> dict[str, Any]:
    runtime = small_runtime()
    if debug is not None:
        runtime["spec"]["debug"] = debug
    return kind(rendered_on(runtime), "RayCluster")


@pytest.mark.parametrize("debug", [None, {}, {"ptrace": False}], ids=["no debug", "an empty debug", "ptrace false"])
def test_without_the_runtimes_ptrace_no_ray_container_may_trace_and_the_dashboard_profiles_nothing(
    debug: dict[str, Any] | None,
) -> None:
    for container in _ray_containers(_with_runtime(debug)):
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert "RAY_DASHBOARD_ENABLE_PROFILING" not in env
        assert "SYS_PTRACE" not in container["securityContext"]["capabilities"].get("add", [])


def test_with_the_runtimes_ptrace_each_ray_container_adds_sys_ptrace_and_the_dashboard_profiles() -> None:
    cluster = _with_runtime({"ptrace": True})
    containers = _ray_containers(cluster)
    assert [c["name"] for c in containers] == ["ray-head", "ray-worker"]
    for container in containers:
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["RAY_DASHBOARD_ENABLE_PROFILING"] == "1"
        assert "SYS_PTRACE" in container["securityContext"]["capabilities"]["add"]
    head, worker = containers
    assert head["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert worker["securityContext"]["capabilities"]["add"] == ["IPC_LOCK", "SYS_PTRACE"]
    preflight = cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]["initContainers"][0]
    assert preflight["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]  # the preflight traces nothing


def test_every_ray_pod_has_the_stacks_directory_and_the_flight_recorder_writing_into_it() -> None:
    for container in _ray_containers(kind(rendered(example("qwen3-4b-colocated")), "RayCluster")):
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["GRPO_STACKS_DIR"] == "/tmp/grpo-stacks"
        assert env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == "/tmp/grpo-stacks/nccl_trace_rank_"
        assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1" and int(env["TORCH_NCCL_TRACE_BUFFER_SIZE"]) > 0


def test_the_stacks_job_reads_the_same_directory_and_stops_waiting_before_the_budget() -> None:
    job = stacks_job("grpo-r-1-g1-a2", "r-forensics-12", 60.0, SETTINGS)
    argv = list(job.entrypoint_argv)
    assert job.submission_id == "grpo-r-1-g1-a2-stacks-12"
    assert argv[argv.index("--dir") + 1] == "/tmp/grpo-stacks"
    assert 0 < float(argv[argv.index("--seconds") + 1]) < 60.0
    assert job.entrypoint_num_cpus == 0 and job.entrypoint_resources == {}
