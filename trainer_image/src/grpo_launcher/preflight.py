"""The preflight: every check in order, each printed as it completes, then one verdict.

Order: host checks first (cheap, no CUDA context), then the GPU probe, then the NCCL all-reduce, which only
runs when the GPUs were counted correctly. A fail anywhere makes the verdict fail; the caller exits with
``PREFLIGHT_FAILED_EXIT`` and the last line ``preflight failed: <check>: <reason>``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from grpo_launcher.allreduce import DEFAULT_SIZES
from grpo_launcher.checks import CheckResult, PreflightReport, Status, passed
from grpo_launcher.config import PreflightSpec
from grpo_launcher.gpu_checks import (
    GpuProbe,
    check_allreduce,
    check_free_memory,
    check_gpu_count,
    format_table,
    run_allreduce,
    run_probe,
)
from grpo_launcher.host_checks import (
    FABRIC_CHECKS,
    HostPaths,
    check_checkpoint_dir,
    check_gdrcopy,
    check_libcuda,
    check_shm,
)
from grpo_launcher.image_checks import image_checks


@dataclass(frozen=True)
class PreflightEnv:
    """Everything the preflight touches outside the config; tests replace parts of it."""

    paths: HostPaths = field(default_factory=HostPaths)
    python: str = sys.executable
    probe: Callable[[str], GpuProbe] = run_probe
    allreduce: Callable[[int, str], dict[str, Any]] = run_allreduce
    allreduce_sizes: tuple[int, ...] = DEFAULT_SIZES
    image_checks: Callable[[], tuple[CheckResult, ...]] = image_checks


def run_preflight(spec: PreflightSpec, env: PreflightEnv, out: TextIO) -> PreflightReport:
    start = time.monotonic()
    results: list[CheckResult] = []

    def record(result: CheckResult) -> CheckResult:
        results.append(result)
        out.write(result.line() + "\n")
        out.flush()
        return result

    libcuda = record(check_libcuda(env.paths, spec.gpus))
    record(check_shm(env.paths, spec.shm_min_gib))
    record(FABRIC_CHECKS[spec.fabric.type](env.paths, spec.fabric.devices))
    record(check_gdrcopy(env.paths, spec.gdrcopy))
    shared = Path(spec.shared_mount) if spec.shared_mount else None
    record(check_checkpoint_dir(env.paths, Path(spec.checkpoint_dir), spec.checkpoint_gib, shared))
    for image_check in env.image_checks():
        record(image_check)
    if spec.gpus == 0:
        record(passed("gpus", "the plan expects no GPUs on this pod; GPU checks skipped"))
    elif libcuda.status is Status.FAIL:
        out.write("(GPU count, memory and all-reduce not run: libcuda failed)\n")
    else:
        probe = env.probe(env.python)
        count = record(check_gpu_count(probe, spec.gpus))
        record(check_free_memory(probe, spec.min_free_gpu_memory_gib))
        if count.status is Status.FAIL:
            out.write("(all-reduce not run: the GPU count is wrong)\n")
        else:
            result = env.allreduce(spec.gpus, env.python)
            if "error" not in result:
                for line in format_table(result):
                    out.write(line + "\n")
            record(check_allreduce(result, spec.min_bus_bandwidth_gbps))
    return PreflightReport(tuple(results), time.monotonic() - start)
