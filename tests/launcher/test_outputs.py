"""What the run produced, as the launcher reports it in its summary line: the evaluations miles logged, the last
Megatron checkpoint the tracker names, and the Hugging Face export, checked whole (a run that asked for one and
has none ends with the ExportMissing failure, since miles only logs a failed export). miles is the test double,
fed the flags the operator renders."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from grpo_launcher.outputs import export_problem
from grpo_launcher.summary import parse_eval_line

from tests.support.launcher import base_config, launcher, write_config

FAKE_MILES = Path(__file__).resolve().parents[2] / "devtools" / "grpo_dev" / "fake_miles.py"


def _summary(stdout: str) -> dict[str, Any]:
    [line] = [x for x in stdout.splitlines() if x.startswith("GRPO_RUN_SUMMARY ")]
    data: dict[str, Any] = json.loads(line.removeprefix("GRPO_RUN_SUMMARY "))
    return data


def _run(tmp_path: Path, *knobs: str) -> tuple[int, dict[str, Any], str]:
    save = tmp_path / "ckpt"
    argv = [
        sys.executable,
        str(FAKE_MILES),
        "--num-rollout",
        "4",
        "--save",
        str(save),
        "--save-interval",
        "2",
        "--save-hf",
        f"{save}/hf/iter_{{rollout_id:07d}}",
        "--eval-interval",
        "2",
        "--eval-prompt-data",
        "aime",
        "/fsx/aime.jsonl",
        "--fake-checkpoints",
        "--fake-step-seconds",
        "0",
        "--fake-data-state-seconds",
        "0",
        "--fake-eval-score",
        "0.25,0.5,0.375",
        "--fake-eval-truncated",
        "0.125",
        *knobs,
    ]
    proc = launcher("run", "--config", str(write_config(tmp_path, base_config(tmp_path))), "--", *argv)
    return proc.returncode, _summary(proc.stdout), proc.stdout + proc.stderr


def test_the_summary_names_every_evaluation_the_checkpoint_and_the_verified_export(tmp_path: Path) -> None:
    code, summary, output = _run(tmp_path)
    assert code == 0, output
    assert summary["evals"] == [
        {"rollout": r, "name": "aime", "score": s, "truncated_ratio": 0.125, "none_reward_ratio": 0.0}
        for r, s in ((0, 0.25), (1, 0.5), (3, 0.375))
    ]
    save = tmp_path / "ckpt"
    assert summary["outputs"] == {
        "checkpoint_iteration": 3,
        "checkpoint_path": f"{save}/iter_0000003",
        "huggingface_path": f"{save}/hf/iter_0000003",
        "huggingface_verified": True,
    }
    assert summary["failure"] is None


def test_a_missing_export_fails_the_run_with_export_missing(tmp_path: Path) -> None:
    code, summary, output = _run(tmp_path, "--fake-skip-hf-export")
    assert code == 1, output
    assert summary["failure"]["reason"] == "ExportMissing"
    assert f"{tmp_path}/ckpt/hf/iter_0000003 does not exist" in summary["failure"]["message"]
    assert summary["outputs"]["huggingface_verified"] is False


@pytest.mark.parametrize(
    ("files", "problem"),
    [
        pytest.param({"config.json": b"{}", "model.safetensors": b"w"}, None, id="whole"),
        pytest.param({"model.safetensors": b"w"}, "config.json is missing or empty", id="no-config"),
        pytest.param({"config.json": b"{}"}, "has no weight files", id="no-weights"),
        pytest.param(
            {"config.json": b"{}", "model-00001-of-00002.safetensors": b"w", "model-00002-of-00002.safetensors": b""},
            "missing or empty: model-00002-of-00002.safetensors",
            id="an-empty-shard",
        ),
        pytest.param(
            {
                "config.json": b"{}",
                "model-00001-of-00002.safetensors": b"w",
                "model.safetensors.index.json": b'{"weight_map": {"a": "model-00001-of-00002.safetensors", '
                b'"b": "model-00002-of-00002.safetensors"}}',
            },
            "missing or empty: model-00002-of-00002.safetensors",
            id="a-shard-the-index-names-is-missing",
        ),
    ],
)
def test_an_export_is_whole_only_with_its_config_and_non_empty_weights(
    tmp_path: Path, files: dict[str, bytes], problem: str | None
) -> None:
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    found = export_problem(tmp_path)
    assert found is None if problem is None else (found is not None and problem in found)


def test_an_eval_line_as_miles_logs_it_gives_one_evaluation_per_set() -> None:
    line = (
        "(RolloutManager pid=7) [x] metrics.py:53 - eval 9: {'eval/aime-none_reward_ratio': 0.0, 'eval/aime': "
        "np.float64(0.4), 'eval/aime/response_len/mean': 900.0, 'eval/aime-truncated_ratio': 0.1, 'eval/aime-pass@1': "
        "0.4, 'eval/math-500': 0.7}"
    )
    assert parse_eval_line(line) == [
        {"rollout": 9, "name": "aime", "score": 0.4, "truncated_ratio": 0.1, "none_reward_ratio": 0.0},
        {"rollout": 9, "name": "math-500", "score": 0.7, "truncated_ratio": None, "none_reward_ratio": None},
    ]
    assert parse_eval_line("perf 9: {'rollout/raw_reward': 0.5}") is None
