"""Argv builders for the optional prepare steps the operator can render as Kubernetes Jobs.

* Download: ``hf download`` from a pinned ``huggingface_hub`` (the ``prepare`` extra). The older
  ``huggingface-cli download`` is a stub that exits 1 in huggingface_hub 1.x. The token reaches the CLI only
  through the ``HF_TOKEN`` environment variable from a Secret, never through argv.
* Conversion: miles's ``tools/convert_hf_to_torch_dist.py`` with the model's architecture flags, under
  ``torchrun`` when more than one GPU is used, with ``PYTHONPATH`` holding Megatron-LM. Its success signal is
  ``latest_checkpointed_iteration.txt`` containing ``release``, written as its last step.

These are builders only: nothing here runs a download or a conversion, and neither was run in this
repository (no network to the Hub, no miles image here).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

MILES_DIR = "/root/miles"
MEGATRON_DIR = "/root/Megatron-LM"
CONVERSION_TRACKER = "latest_checkpointed_iteration.txt"


def hf_download_argv(
    repo_id: str,
    local_dir: str,
    repo_type: Literal["model", "dataset"] = "model",
    revision: str | None = None,
) -> list[str]:
    """``hf download`` of one repository into ``local_dir`` (pin ``revision`` to a commit for reproducibility)."""
    if not repo_id or repo_id.startswith("-"):
        raise ValueError(f"repo_id {repo_id!r}: must be an owner/name repository id")
    argv = ["hf", "download", repo_id, "--local-dir", local_dir]
    if repo_type != "model":
        argv += ["--repo-type", repo_type]
    if revision:
        argv += ["--revision", revision]
    return argv


def model_args_argv(model_type: str, miles_dir: str = MILES_DIR) -> list[str]:
    """Prints a model's architecture flags on one line (miles after 2026-08-09; older images source
    ``scripts/models/<type>.sh`` instead)."""
    return ["python3", f"{miles_dir}/miles/utils/external_utils/model_args_utils.py", model_type]


def convert_hf_to_torch_dist_argv(
    model_args: Sequence[str], hf_dir: str, save_dir: str, gpus: int = 1, miles_dir: str = MILES_DIR
) -> list[str]:
    """HF -> Megatron torch_dist; run with ``PYTHONPATH`` = ``conversion_env()`` and cwd ``miles_dir``."""
    if gpus < 1:
        raise ValueError(f"gpus {gpus}: must be at least 1")
    script = f"{miles_dir}/tools/convert_hf_to_torch_dist.py"
    launcher = ["python3", script] if gpus == 1 else ["torchrun", f"--nproc_per_node={gpus}", script]
    return [*launcher, *model_args, "--hf-checkpoint", hf_dir, "--save", save_dir]


def conversion_env(megatron_dir: str = MEGATRON_DIR, miles_dir: str = MILES_DIR) -> dict[str, str]:
    return {"PYTHONPATH": f"{megatron_dir}:{miles_dir}"}


def conversion_complete(save_dir: Path) -> bool:
    """True once the converter wrote its tracker file with ``release`` (its last step)."""
    try:
        return (save_dir / CONVERSION_TRACKER).read_text().strip() == "release"
    except OSError:
        return False
