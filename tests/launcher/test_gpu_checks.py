"""GPU count, free memory and all-reduce verdicts, from measured tables and from the real child processes."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from grpo_launcher.checks import Status
from grpo_launcher.gpu_checks import (
    GpuProbe,
    check_allreduce,
    check_free_memory,
    check_gpu_count,
    format_table,
    run_allreduce,
    run_probe,
)

GIB = 2**30


def _probe(*free_gib: float, total_gib: float = 139.8, name: str = "NVIDIA H200", cvd: str | None = None) -> GpuProbe:
    devices = tuple(
        {"index": i, "name": name, "free": int(f * GIB), "total": int(total_gib * GIB)} for i, f in enumerate(free_gib)
    )
    return GpuProbe(devices, cvd, torch="2.11.0", nccl="2.28.9")


def test_the_planned_gpu_count_passes() -> None:
    result = check_gpu_count(_probe(139, 139), expected=2)
    assert result.status is Status.PASS
    assert "2 x NVIDIA H200" in result.reason


def test_a_gpu_count_off_the_plan_fails_and_shows_cuda_visible_devices() -> None:
    result = check_gpu_count(_probe(139, cvd=""), expected=8)
    assert result.status is Status.FAIL
    assert "1 GPUs visible (CUDA_VISIBLE_DEVICES='')" in result.reason
    assert "--num-gpus-per-node" in result.reason


def test_more_gpus_than_planned_also_fails() -> None:
    assert check_gpu_count(_probe(139, 139, 139), expected=2).status is Status.FAIL


def test_mixed_gpu_models_are_a_warning() -> None:
    probe = GpuProbe(_probe(139).devices + _probe(79, total_gib=79.6, name="NVIDIA H100").devices, None)
    assert check_gpu_count(probe, expected=2).status is Status.WARN


def test_a_probe_that_failed_fails_the_count_with_its_reason() -> None:
    result = check_gpu_count(GpuProbe((), None, error="RuntimeError: CUDA driver error"), expected=8)
    assert result.status is Status.FAIL
    assert "CUDA driver error" in result.reason


def test_enough_free_memory_on_every_gpu_passes() -> None:
    assert check_free_memory(_probe(139.3, 139.3), min_free_gib=98).status is Status.PASS


def test_one_gpu_short_of_memory_fails_and_names_it() -> None:
    result = check_free_memory(_probe(139.3, 40.0), min_free_gib=98)
    assert result.status is Status.FAIL
    assert "GPU 1: 40.0 GiB" in result.reason
    assert "GPU 0" not in result.reason


def test_memory_already_in_use_but_enough_is_a_warning() -> None:
    result = check_free_memory(_probe(139.3, 110.0), min_free_gib=98)
    assert result.status is Status.WARN
    assert "GPU 1: 110.0 of 139.8 GiB free" in result.reason


def _allreduce(world: int, busbw: list[float], correct: bool = True) -> dict[str, Any]:
    rows = [
        {"bytes": 2**20 * 4**i, "seconds": 1e-3, "algbw_gbps": b, "busbw_gbps": b, "correct": correct}
        for i, b in enumerate(busbw)
    ]
    return {"world": world, "dtype": "bfloat16", "nccl": "2.28.9", "rows": rows}


def test_allreduce_above_the_floor_passes() -> None:
    result = check_allreduce(_allreduce(2, [30.0, 200.0, 327.4]), floor_gbps=300)
    assert result.status is Status.PASS
    assert "327.4 GB/s" in result.reason


def test_allreduce_below_the_floor_fails_with_the_measured_value() -> None:
    result = check_allreduce(_allreduce(8, [30.0, 150.0, 180.2]), floor_gbps=300)
    assert result.status is Status.FAIL
    assert "180.2 GB/s" in result.reason
    assert "floor of 300 GB/s" in result.reason


def test_allreduce_with_no_floor_reports_only() -> None:
    result = check_allreduce(_allreduce(2, [1.0, 2.0]), floor_gbps=0)
    assert result.status is Status.PASS
    assert "report only" in result.reason


def test_a_wrong_allreduce_sum_fails_whatever_the_bandwidth() -> None:
    result = check_allreduce(_allreduce(2, [400.0], correct=False), floor_gbps=0)
    assert result.status is Status.FAIL
    assert "wrong sum" in result.reason


def test_one_gpu_with_a_floor_is_a_warning_since_there_is_no_bus() -> None:
    assert check_allreduce(_allreduce(1, [0.0]), floor_gbps=300).status is Status.WARN
    assert check_allreduce(_allreduce(1, [0.0]), floor_gbps=0).status is Status.PASS


def test_an_allreduce_error_fails() -> None:
    result = check_allreduce({"error": "the all-reduce did not finish within 300 s (an NCCL hang)"}, floor_gbps=0)
    assert result.status is Status.FAIL
    assert "NCCL hang" in result.reason


def test_the_bandwidth_table_prints_one_line_per_size() -> None:
    lines = format_table(_allreduce(2, [30.0, 200.0, 327.4]))
    assert len(lines) == 5
    assert lines[-1].split()[:2] == ["16", "MiB"]
    assert "327.4" in lines[-1]


def test_a_single_gpu_table_shows_no_bandwidth() -> None:
    assert "n/a" in format_table(_allreduce(1, [0.0]))[-1]


def _has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(_has_torch(), reason="checks the no-torch path; this interpreter has torch")
def test_the_real_probe_without_torch_reports_why() -> None:
    probe = run_probe(sys.executable)
    assert probe.error == "ModuleNotFoundError: No module named 'torch'"
    assert check_gpu_count(probe, expected=1).status is Status.FAIL


@pytest.mark.skipif(_has_torch(), reason="checks the no-torch path; this interpreter has torch")
def test_the_real_allreduce_without_torch_reports_why() -> None:
    result = run_allreduce(2, sys.executable, timeout=60, sizes=[2**20])
    assert "No module named 'torch'" in result["error"]


def test_a_probe_program_that_crashes_is_reported_with_its_last_line(tmp_path: Any) -> None:
    fake_python = tmp_path / "python"
    fake_python.write_text("#!/bin/sh\necho 'Segmentation fault' >&2\nexit 139\n")
    fake_python.chmod(0o755)
    probe = run_probe(str(fake_python))
    assert probe.error == "the GPU probe exited 139: Segmentation fault"
