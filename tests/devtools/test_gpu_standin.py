"""The GPU stand-in of the ray-node-gpu dev layer (devtools/images/gpu_standin/) answers the launcher's own preflight
checks for the GPUs a pod was given (GRPO_STANDIN_GPUS), and for none as a container without GPUs does: libcuda's
cuInit, the GPU probe (count, model, memory), the one-rank all-reduce, and nvidia-smi's provenance query."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from grpo_launcher.checks import Status
from grpo_launcher.gpu_checks import check_allreduce, check_free_memory, check_gpu_count, run_allreduce, run_probe
from grpo_launcher.host_checks import HostPaths, check_libcuda
from grpo_launcher.provenance import gpu_facts

STANDIN = Path(__file__).resolve().parents[2] / "devtools" / "images" / "gpu_standin"


@pytest.fixture(scope="module")
def libcuda(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the stand-in libcuda")
    target = tmp_path_factory.mktemp("standin") / "libcuda.so.1"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(target), str(STANDIN / "libcuda.c")], check=True)
    return target


@pytest.fixture
def gpus(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The stand-in torch importable by the preflight's child processes, one GPU of 79.6 GiB given to the pod."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(STANDIN), *sys.path]))
    monkeypatch.setenv("GRPO_STANDIN_GPUS", "1")
    monkeypatch.setenv("GRPO_STANDIN_GPU_MEMORY_GIB", "79.6")
    yield


def test_the_preflight_gpu_checks_pass_on_the_played_gpu(libcuda: Path, gpus: None) -> None:
    assert check_libcuda(HostPaths(libcuda=str(libcuda)), 1).status is Status.PASS
    probe = run_probe()
    count = check_gpu_count(probe, 1)
    assert count.status is Status.PASS and "1 x NVIDIA H100 80GB HBM3 (stand-in)" in count.line(), count.line()
    assert check_free_memory(probe, 70.0).status is Status.PASS
    assert check_free_memory(probe, 80.0).status is Status.FAIL  # 79.6 GiB: the plan's need is checked, not faked
    reduced = run_allreduce(1, sizes=(2**20,))
    assert check_allreduce(reduced, 0).status is Status.PASS, reduced


def test_a_plan_of_more_gpus_than_the_pod_was_given_fails_as_on_a_real_node(libcuda: Path, gpus: None) -> None:
    assert check_gpu_count(run_probe(), 2).status is Status.FAIL
    assert "error" in run_allreduce(2, sizes=(2**20,))


def test_without_gpus_cuinit_says_no_device(libcuda: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GRPO_STANDIN_GPUS", raising=False)
    result = check_libcuda(HostPaths(libcuda=str(libcuda)), 1)
    assert result.status is Status.FAIL and "CUDA_ERROR_NO_DEVICE" in result.line()


def test_nvidia_smi_answers_the_provenance_query(gpus: None) -> None:
    facts = gpu_facts(str(STANDIN / "nvidia-smi"))
    assert facts == {"gpu_model": "NVIDIA H100 80GB HBM3 (stand-in)", "gpu_count": "1", "driver_version": "580.65.06"}
