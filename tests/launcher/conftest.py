"""Fixtures for the launcher tests: run configs, device stand-ins, a stand-in libcuda, stand-in programs."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from grpo_launcher.host_checks import HostPaths

STUB_LIBCUDA = """
int cuInit(unsigned int flags) { return STUB_RESULT; }
int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
"""


def base_config(tmp_path: Path, **preflight: Any) -> dict[str, Any]:
    """A run config as the operator renders it, for a pod that expects no GPUs unless told otherwise."""
    pre = {
        "gpus": 0,
        "minFreeGpuMemoryGiB": 0.0,
        "shmMinGiB": 0.001,
        "efaDevices": 0,
        "gdrcopy": False,
        "checkpointDir": str(tmp_path / "checkpoints"),
        "checkpointGiB": 0.001,
        "minBusBandwidthGBps": 0.0,
        "metricsPort": 0,
    }
    pre.update(preflight)
    return {
        "apiVersion": "grpo.dev/v1alpha1",
        "kind": "RunConfig",
        "run": {"name": "qwen3-4b", "namespace": "default", "uid": "1234"},
        "spec": {"model": {"hfCheckpoint": "/fsx/models/Qwen3-4B"}, "somethingNew": {"x": 1}},
        "plan": {"workerReplicas": 1, "gpusPerNode": 8, "totalGpus": 8, "fits": True, "newPlanKey": 3},
        "preflight": pre,
        "argv": None,
        "env": {"CUDA_DEVICE_MAX_CONNECTIONS": "1"},
    }


def write_config(tmp_path: Path, config: dict[str, Any]) -> Path:
    path = tmp_path / "run-config.json"
    path.write_text(json.dumps(config))
    return path


def executable(path: Path, body: str) -> Path:
    """A stand-in program (a shell script) at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


@pytest.fixture
def stub_libcuda(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int, str], Path]:
    """Compile a shared library that exports cuInit (returning ``result``) and cuDriverGetVersion."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the stand-in libcuda")
    root = tmp_path_factory.mktemp("libcuda")

    def build(result: int, relative: str = "libcuda.so.1") -> Path:
        source = root / "stub.c"
        source.write_text(STUB_LIBCUDA)
        target = root / str(result) / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [compiler, "-shared", "-fPIC", f"-DSTUB_RESULT={result}", "-o", str(target), str(source)], check=True
        )
        return target

    return build


@pytest.fixture
def host(tmp_path: Path) -> HostPaths:
    """Device paths stood in by temporary directories: no EFA, no gdrdrv, a real tmp dir as /dev/shm."""
    root = tmp_path / "host"
    for sub in ("shm", "dev-infiniband", "sys-infiniband", "gdrcopy-lib"):
        (root / sub).mkdir(parents=True)
    mounts = root / "mounts"
    mounts.write_text(f"tmpfs {root / 'shm'} tmpfs rw 0 0\n")
    return HostPaths(
        libcuda="libcuda-not-here.so.1",
        shm=root / "shm",
        infiniband_dev=root / "dev-infiniband",
        infiniband_sysfs=root / "sys-infiniband",
        fi_info=root / "efa-bin" / "fi_info",
        gdrdrv=root / "gdrdrv",
        gdrcopy_lib_dir=root / "gdrcopy-lib",
        mounts=mounts,
    )


def launcher(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``python -m grpo_launcher`` as the Ray job would."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "grpo_launcher", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        check=False,
    )
