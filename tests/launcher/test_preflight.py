"""The preflight as a whole: order, verdict, the operator-facing last line and the exit code."""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grpo_launcher.checks import PREFLIGHT_FAILED_EXIT
from grpo_launcher.config import parse_run_config
from grpo_launcher.gpu_checks import GpuProbe
from grpo_launcher.host_checks import HostPaths
from grpo_launcher.preflight import PreflightEnv, run_preflight

from tests.support.launcher import base_config, launcher, write_config

GIB = 2**30


def _gpu_env(host: HostPaths, libcuda: Path, busbw: float) -> PreflightEnv:
    probe = GpuProbe(
        tuple({"index": i, "name": "NVIDIA H200", "free": 139 * GIB, "total": 140 * GIB} for i in range(2)), None
    )
    rows = [{"bytes": 2**30, "seconds": 0.0033, "algbw_gbps": busbw, "busbw_gbps": busbw, "correct": True}]

    def allreduce(gpus: int, _python: str) -> dict[str, Any]:
        return {"world": gpus, "dtype": "bfloat16", "nccl": "2.28.9", "rows": rows}

    return PreflightEnv(
        paths=dataclasses.replace(host, libcuda=str(libcuda)),
        probe=lambda _python: probe,
        allreduce=allreduce,
    )


def test_all_checks_run_in_order_and_pass(tmp_path: Path, host: HostPaths, stub_libcuda: Callable[..., Path]) -> None:
    spec = parse_run_config(json.dumps(base_config(tmp_path, gpus=2, minFreeGpuMemoryGiB=98))).preflight
    out = io.StringIO()
    report = run_preflight(spec, _gpu_env(host, stub_libcuda(0), busbw=327.4), out)
    assert report.ok
    names = [r.name for r in report.results]
    assert names == [
        "libcuda",
        "shm",
        "efa",
        "gdrcopy",
        "checkpoint",
        "prometheus_client",
        "wget",
        "gpus",
        "gpu-memory",
        "nccl-allreduce",
    ]
    printed = out.getvalue().splitlines()
    assert printed[0].startswith("[pass] libcuda: ")
    assert any(line.startswith("all-reduce bfloat16 over 2 GPU(s)") for line in printed)


def test_a_bandwidth_below_the_floor_fails_the_preflight_with_the_operator_line(
    tmp_path: Path, host: HostPaths, stub_libcuda: Callable[..., Path]
) -> None:
    spec = parse_run_config(json.dumps(base_config(tmp_path, gpus=2, minBusBandwidthGBps=300))).preflight
    report = run_preflight(spec, _gpu_env(host, stub_libcuda(0), busbw=120.0), io.StringIO())
    assert not report.ok
    assert report.failure_line().startswith("preflight failed: nccl-allreduce: bus bandwidth 120.0 GB/s")


def test_several_failures_name_the_first_and_count_the_rest(
    tmp_path: Path, host: HostPaths, stub_libcuda: Callable[..., Path]
) -> None:
    spec = parse_run_config(
        json.dumps(base_config(tmp_path, shmMinGiB=10**9, fabric={"type": "efa", "devices": 16}, gdrcopy=True))
    ).preflight
    report = run_preflight(spec, PreflightEnv(paths=host), io.StringIO())
    assert report.failure_line().startswith("preflight failed: shm: ")
    assert report.failure_line().endswith("(and 2 more: efa, gdrcopy)")


def _cli_paths(host: HostPaths, libcuda: str) -> list[str]:
    return [
        "--libcuda",
        libcuda,
        "--shm",
        str(host.shm),
        "--infiniband-dev",
        str(host.infiniband_dev),
        "--infiniband-sysfs",
        str(host.infiniband_sysfs),
        "--fi-info",
        str(host.fi_info),
        "--gdrdrv",
        str(host.gdrdrv),
        "--gdrcopy-lib-dir",
        str(host.gdrcopy_lib_dir),
    ]


def test_the_preflight_command_passes_on_a_pod_that_expects_no_gpus(tmp_path: Path, host: HostPaths) -> None:
    config = write_config(tmp_path, base_config(tmp_path))
    proc = launcher("preflight", "--config", str(config), *_cli_paths(host, host.libcuda))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1].startswith("preflight passed in ")
    summary = json.loads(proc.stdout.splitlines()[-2])
    assert summary["preflight"] == "passed"
    assert {c["name"]: c["status"] for c in summary["checks"]}["libcuda"] == "warn"


def test_the_preflight_command_exits_3_with_the_failure_as_its_last_line(tmp_path: Path, host: HostPaths) -> None:
    config = write_config(tmp_path, base_config(tmp_path, fabric={"type": "efa", "devices": 16}))
    proc = launcher("preflight", "--config", str(config), *_cli_paths(host, host.libcuda))
    assert proc.returncode == PREFLIGHT_FAILED_EXIT
    last = proc.stdout.splitlines()[-1]
    assert last.startswith("preflight failed: efa: 0 EFA devices under ")
    assert "[fail] efa: " in proc.stdout


def test_a_gpu_pod_without_a_usable_cuda_stack_fails_the_real_preflight(
    tmp_path: Path, host: HostPaths, stub_libcuda: Callable[..., Path]
) -> None:
    """The real GPU probe runs in a child process; on this CPU machine it cannot count any GPU."""
    config = write_config(tmp_path, base_config(tmp_path, gpus=8))
    proc = launcher("preflight", "--config", str(config), *_cli_paths(host, str(stub_libcuda(0))))
    assert proc.returncode == PREFLIGHT_FAILED_EXIT
    assert proc.stdout.splitlines()[-1].startswith("preflight failed: gpus: ")
    assert "(all-reduce not run: the GPU count is wrong)" in proc.stdout


def test_a_broken_config_exits_2_with_the_field_named(tmp_path: Path) -> None:
    config = base_config(tmp_path)
    config["preflight"]["fabric"]["devices"] = "sixteen"
    proc = launcher("preflight", "--config", str(write_config(tmp_path, config)))
    assert proc.returncode == 2
    assert 'preflight.fabric.devices: "sixteen"' in proc.stderr
    assert "Traceback" not in proc.stderr
