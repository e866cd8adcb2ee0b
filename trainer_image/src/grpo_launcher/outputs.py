"""What the run wrote, read when miles has exited: the last Megatron checkpoint and the Hugging Face export.

The checkpoint is the one Megatron's tracker names (`latest_checkpointed_iteration.txt` under `--save`, the same
file miles resumes from), in `<save>/iter_<7 digits>`. miles writes the Hugging Face copy of each save to
`--save-hf` formatted with the save's rollout id (`save_hf.format(rollout_id=...)`,
`miles/backends/megatron_utils/actor.py:658-661`, `model.py:892`) and only LOGS a failed export
(`model.py:908-910`: "Failed to save HuggingFace format"), so a run that asked for one cannot succeed on miles's exit
code alone: the launcher checks the export of the last save has `config.json` and weight files, none of them empty,
and otherwise ends the run with the `ExportMissing` failure (the operator's Failed reason, grpo_launcher.summary).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grpo_launcher.presave import tracker_iteration

EXPORT_MISSING = "ExportMissing"
WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")
INDEX = "model.safetensors.index.json"


def _empty(path: Path) -> bool:
    try:
        return path.stat().st_size == 0
    except OSError:
        return True


def _indexed_shards(directory: Path) -> list[Path]:
    """The shards the safetensors index names (a sharded export lists them all there)."""
    try:
        index = json.loads((directory / INDEX).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    weights = index.get("weight_map") if isinstance(index, dict) else None
    return [directory / name for name in sorted(set(weights.values()))] if isinstance(weights, dict) else []


def export_problem(directory: Path) -> str | None:
    """Why `directory` is not a whole Hugging Face export, or None when it is."""
    if not directory.is_dir():
        return f"{directory} does not exist"
    if _empty(directory / "config.json"):
        return f"{directory}/config.json is missing or empty"
    weights = sorted(
        {p for pattern in WEIGHT_PATTERNS for p in directory.glob(pattern)} | set(_indexed_shards(directory))
    )
    if not weights:
        return f"{directory} has no weight files ({', '.join(WEIGHT_PATTERNS)})"
    bad = [p.name for p in weights if _empty(p)]
    return f"{directory}: weight file(s) missing or empty: {', '.join(bad[:5])}" if bad else None


def collect(save: str | None, save_hf: str | None) -> tuple[dict[str, Any], str | None]:
    """(the summary's `outputs`, why the export asked for is not there or None)."""
    iteration = tracker_iteration(Path(save)) if save else None
    found: dict[str, Any] = {
        "checkpoint_iteration": iteration,
        "checkpoint_path": f"{save}/iter_{iteration:07d}" if save and iteration is not None else None,
        "huggingface_path": None,
        "huggingface_verified": None,
    }
    if not save_hf:
        return found, None
    if iteration is None:
        return {**found, "huggingface_verified": False}, f"no checkpoint was saved under {save}, so no export either"
    try:
        path = save_hf.format(rollout_id=iteration)
    except (KeyError, IndexError, ValueError) as exc:
        return {**found, "huggingface_verified": False}, f"--save-hf {save_hf!r} cannot be formatted: {exc}"
    problem = export_problem(Path(path))
    return {**found, "huggingface_path": path, "huggingface_verified": problem is None}, problem
