"""Provenance read from the image: commits, versions, GPU model and driver; the info metric."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path

from grpo_launcher.metrics import serve
from grpo_launcher.provenance import ProvenanceSources, collect, git_commit, gpu_facts, provenance_line
from prometheus_client.parser import text_string_to_metric_families

from tests.support.launcher import executable


def _repo(path: Path) -> str:
    path.mkdir(parents=True)
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git[:3], "init", "-q"], check=True)
    (path / "train.py").write_text("print('miles')\n")
    subprocess.run([*git, "add", "train.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "miles"], check=True)
    return subprocess.run([*git[:3], "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()


def test_the_miles_commit_is_read_from_the_checkout(tmp_path: Path) -> None:
    head = _repo(tmp_path / "miles")
    assert git_commit(tmp_path / "miles") == head


def test_a_missing_checkout_is_stated_not_guessed(tmp_path: Path) -> None:
    assert git_commit(tmp_path / "absent") == f"absent: {tmp_path / 'absent'} does not exist"


def test_a_directory_that_is_not_a_repository_says_git_failed(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    assert git_commit(tmp_path / "plain").startswith("absent: git rev-parse failed: ")


def test_gpu_model_count_and_driver_come_from_nvidia_smi(tmp_path: Path) -> None:
    smi = executable(tmp_path / "nvidia-smi", "printf 'NVIDIA H200, 580.159.04\\nNVIDIA H200, 580.159.04\\n'")
    assert gpu_facts(str(smi)) == {"gpu_model": "NVIDIA H200", "gpu_count": "2", "driver_version": "580.159.04"}


def test_a_failing_nvidia_smi_is_reported_with_its_message(tmp_path: Path) -> None:
    smi = executable(tmp_path / "nvidia-smi", "echo 'NVIDIA-SMI has failed because it could not communicate' ; exit 9")
    facts = gpu_facts(str(smi))
    assert facts["gpu_model"].startswith("absent: nvidia-smi exited 9: NVIDIA-SMI has failed")
    assert gpu_facts(str(tmp_path / "none"))["gpu_model"] == "absent: nvidia-smi not found"


def test_collected_provenance_is_one_json_line_with_every_field(tmp_path: Path) -> None:
    head = _repo(tmp_path / "miles")
    sources = ProvenanceSources(
        miles_dir=tmp_path / "miles",
        megatron_dir=tmp_path / "Megatron-LM",
        sglang_dir=tmp_path / "sglang",
        nvidia_smi=str(executable(tmp_path / "smi", "echo 'NVIDIA H200, 580.159.04'")),
    )
    facts = collect(sources, {"name": "r"}, env={"GRPO_EFA_INSTALLER_VERSION": "1.48.0"})
    line = provenance_line(facts)
    assert "\n" not in line
    parsed = json.loads(line)["grpo_trainer_provenance"]
    assert parsed["miles_commit"] == head
    assert parsed["megatron_commit"].startswith("absent: ")
    assert parsed["image_efa_installer"] == "1.48.0"
    assert parsed["image_gdrcopy"] == "absent: GRPO_GDRCOPY_VERSION not set"
    assert parsed["gpu_model"] == "NVIDIA H200"
    assert parsed["run_name"] == "r"
    for key in ("sglang", "ray", "torch", "megatron", "driver_version"):
        assert parsed[key]


def test_the_info_metric_carries_every_fact_as_a_label() -> None:
    facts = {"miles_commit": "dec268f7", "ray": "2.56.1", "gpu_model": "NVIDIA H200"}
    server = serve(facts, 0, "127.0.0.1")
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10).read().decode()
    finally:
        server.close()
    families = {f.name: f for f in text_string_to_metric_families(body)}
    (sample,) = families["grpo_trainer_provenance_info"].samples
    assert sample.name == "grpo_trainer_provenance_info"
    assert sample.labels == facts
    assert sample.value == 1.0
