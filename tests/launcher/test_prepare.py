"""The prepare steps' argv builders (download with hf, HF -> torch_dist conversion)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from grpo_launcher.prepare import (
    conversion_complete,
    conversion_env,
    convert_hf_to_torch_dist_argv,
    hf_download_argv,
    model_args_argv,
)


def test_a_model_download_uses_hf_not_the_deprecated_huggingface_cli() -> None:
    assert hf_download_argv("Qwen/Qwen3-4B", "/fsx/models/Qwen3-4B") == [
        "hf",
        "download",
        "Qwen/Qwen3-4B",
        "--local-dir",
        "/fsx/models/Qwen3-4B",
    ]


def test_a_dataset_download_names_its_repo_type_and_pinned_revision() -> None:
    argv = hf_download_argv("zhuzilin/aime-2024", "/fsx/data/aime-2024", repo_type="dataset", revision="abc123")
    assert argv[-4:] == ["--repo-type", "dataset", "--revision", "abc123"]


def test_a_repo_id_that_looks_like_a_flag_is_refused() -> None:
    with pytest.raises(ValueError, match="owner/name"):
        hf_download_argv("--token=x", "/fsx/m")


def test_single_gpu_conversion_runs_the_script_with_the_model_flags_first() -> None:
    argv = convert_hf_to_torch_dist_argv(["--num-layers", "36"], "/fsx/m/Qwen3-4B", "/fsx/m/Qwen3-4B_torch_dist")
    assert argv == [
        "python3",
        "/root/miles/tools/convert_hf_to_torch_dist.py",
        "--num-layers",
        "36",
        "--hf-checkpoint",
        "/fsx/m/Qwen3-4B",
        "--save",
        "/fsx/m/Qwen3-4B_torch_dist",
    ]


def test_multi_gpu_conversion_runs_under_torchrun() -> None:
    argv = convert_hf_to_torch_dist_argv([], "/h", "/s", gpus=8)
    assert argv[:2] == ["torchrun", "--nproc_per_node=8"]
    assert conversion_env()["PYTHONPATH"].startswith("/root/Megatron-LM")


def test_the_model_args_argv_prints_the_flags_of_the_pinned_miles_model_script(tmp_path: Path) -> None:
    # At the pin the flags are a bash array in scripts/models/<type>.sh (no model_args_utils.py there).
    models = tmp_path / "scripts" / "models"
    models.mkdir(parents=True)
    (models / "qwen3-4B.sh").write_text(
        'MODEL_ARGS=(\n   --swiglu\n   --num-layers 36\n   --rotary-base "${ROPE:-1000000}"\n)\n'
    )
    out = subprocess.run(model_args_argv("qwen3-4B", str(tmp_path)), capture_output=True, text=True, check=True)
    assert out.stdout.split("\n") == ["--swiglu", "--num-layers", "36", "--rotary-base", "1000000", ""]


def test_conversion_is_complete_only_once_the_tracker_says_release(tmp_path: Path) -> None:
    assert not conversion_complete(tmp_path)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("1\n")
    assert not conversion_complete(tmp_path)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("release\n")
    assert conversion_complete(tmp_path)
