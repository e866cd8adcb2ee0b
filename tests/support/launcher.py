"""Builders for the launcher tests: run configs as the operator renders them, stand-in programs, and the launcher
run as the Ray job runs it."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any


def base_config(tmp_path: Path, **preflight: Any) -> dict[str, Any]:
    """A run config as the operator renders it, for a pod that expects no GPUs unless told otherwise."""
    pre = {
        "gpus": 0,
        "minFreeGpuMemoryGiB": 0.0,
        "shmMinGiB": 0.001,
        "fabric": {"type": "efa", "devices": 0},
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
