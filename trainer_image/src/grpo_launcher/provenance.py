"""What is actually inside the image, read at start: commits, package versions, GPU model and driver.

Documented versions drift from what an image holds (miles commit, Ray, SGLang), so the launcher reads them from the
running image and prints them as one JSON line, and serves them as the Prometheus info metric
``grpo_trainer_provenance_info``. Nothing here imports torch or touches CUDA: package versions come from installed
metadata, the GPU model and driver from ``nvidia-smi``. A value that cannot be read is stated as ``absent: <why>``
rather than guessed.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_launcher import __version__

# package label -> distribution names to try, in order
PACKAGES: dict[str, tuple[str, ...]] = {
    "sglang": ("sglang",),
    "ray": ("ray",),
    "torch": ("torch",),
    "megatron": ("megatron-core", "megatron_core", "megatron-lm"),
    "transformer_engine": ("transformer_engine", "transformer-engine"),
}

# image facts the Dockerfile records as environment variables (see trainer_image/Dockerfile)
IMAGE_ENV = {
    "image_miles_base": "GRPO_MILES_BASE",
    "image_efa_installer": "GRPO_EFA_INSTALLER_VERSION",
    "image_gdrcopy": "GRPO_GDRCOPY_VERSION",
    "image_miles_version": "GRPO_MILES_VERSION",  # the miles version the image declares (Dockerfile MILES_VERSION)
}


@dataclass(frozen=True)
class ProvenanceSources:
    """Where provenance is read from; injectable so CPU tests can stand in a repository and nvidia-smi."""

    miles_dir: Path = Path("/root/miles")
    megatron_dir: Path = Path("/root/Megatron-LM")
    sglang_dir: Path = Path("/sgl-workspace/sglang")
    nvidia_smi: str = "nvidia-smi"


def git_commit(directory: Path) -> str:
    """HEAD of the checkout at ``directory``, or ``absent: <why>``."""
    if not directory.exists():
        return f"absent: {directory} does not exist"
    try:
        proc = subprocess.run(
            ["git", "-c", f"safe.directory={directory}", "-C", str(directory), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except FileNotFoundError:
        return "absent: git is not installed"
    except subprocess.TimeoutExpired:
        return "absent: git rev-parse timed out"
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        return f"absent: git rev-parse failed: {lines[-1] if lines else proc.returncode}"
    return proc.stdout.strip()


def package_version(names: tuple[str, ...]) -> str:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "absent: not installed"


def gpu_facts(nvidia_smi: str) -> dict[str, str]:
    """GPU model(s), count and driver version from nvidia-smi (no CUDA context)."""
    argv = [nvidia_smi, "--query-gpu=name,driver_version", "--format=csv,noheader"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except FileNotFoundError:
        return {"gpu_model": "absent: nvidia-smi not found", "gpu_count": "0", "driver_version": "absent"}
    except subprocess.TimeoutExpired:
        return {"gpu_model": "absent: nvidia-smi timed out", "gpu_count": "0", "driver_version": "absent"}
    rows = [line.split(",") for line in proc.stdout.strip().splitlines() if "," in line]
    if proc.returncode != 0 or not rows:
        why = (proc.stderr or proc.stdout).strip().splitlines()
        reason = f"absent: nvidia-smi exited {proc.returncode}: {why[-1] if why else 'no output'}"
        return {"gpu_model": reason, "gpu_count": "0", "driver_version": "absent"}
    models = sorted({r[0].strip() for r in rows})
    drivers = sorted({r[1].strip() for r in rows})
    return {"gpu_model": ",".join(models), "gpu_count": str(len(rows)), "driver_version": ",".join(drivers)}


def collect(
    sources: ProvenanceSources, run: Mapping[str, str] | None = None, env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """All provenance as flat string labels (what an info metric carries)."""
    env = os.environ if env is None else env
    facts: dict[str, str] = {"launcher": __version__}
    facts["miles_commit"] = git_commit(sources.miles_dir)
    facts["megatron_commit"] = git_commit(sources.megatron_dir)
    facts["sglang_commit"] = git_commit(sources.sglang_dir)
    for label, names in PACKAGES.items():
        facts[label] = package_version(names)
    facts.update(gpu_facts(sources.nvidia_smi))
    for label, var in IMAGE_ENV.items():
        facts[label] = env.get(var, f"absent: {var} not set")
    for key, value in (run or {}).items():
        facts[f"run_{key}"] = value
    return facts


def provenance_line(facts: Mapping[str, str]) -> str:
    """The single JSON line printed at start."""
    payload: dict[str, Any] = {"grpo_trainer_provenance": dict(sorted(facts.items()))}
    return json.dumps(payload, sort_keys=True)
