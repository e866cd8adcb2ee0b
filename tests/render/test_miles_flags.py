"""Every miles argv we render, checked against miles's own flags at the pinned commits (tests/data/miles_flags.json,
extracted by `make miles-flags` from radixark/miles, its Megatron-LM fork and SGLang without importing them)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from grpo_dev import miles_flags
from grpo_dev.miles_flags import FlagData, check_argv
from grpo_operator.planning.flags import MANAGED_FLAGS
from hypothesis import given

from tests.support.builders import example, rendered, valid_examples
from tests.support.fuzzing import PROPERTY, valid_runs
from tests.support.fuzzing import rendered as rendered_or_assume

REPO = Path(__file__).resolve().parents[2]
DATA = FlagData.load()
BASE = ["python3", "/root/miles/train.py", "--rollout-batch-size", "8"]


def test_the_flag_data_comes_from_the_pinned_commits() -> None:
    # A bumped pin (miles_flags.MILES_COMMIT, MEGATRON_COMMIT, ...) without `make miles-flags` fails here.
    assert DATA.sources["miles"]["commit"].startswith(miles_flags.MILES_COMMIT)
    assert DATA.sources["megatron"]["branch"] == miles_flags.MEGATRON_BRANCH
    assert DATA.sources["megatron"]["commit"] == miles_flags.MEGATRON_COMMIT
    assert DATA.sources["router"]["commit"] == miles_flags.ROUTER_COMMIT
    assert DATA.sources["sglang"]["version"] == miles_flags.SGLANG_VERSION


def test_the_operators_flag_table_is_the_data_file_as_generated() -> None:
    committed = json.loads(miles_flags.DATA_FILE.read_text())
    assert miles_flags.TABLE_MODULE.read_text() == miles_flags.table_module(committed), "run make miles-flags"


def _dockerfile_args() -> dict[str, str]:
    text = (REPO / "trainer_image" / "Dockerfile").read_text()
    return dict(re.findall(r"^ARG (MILES_BASE_\w+)=(\S+)$", text, re.MULTILINE))


def _docs_pins() -> dict[str, str]:
    """The "Pins" table of docs/integrations/miles.md: `| what | value | ... |` rows."""
    text = (REPO / "docs" / "integrations" / "miles.md").read_text()
    section = text.split("## Pins", 1)[1].split("\n## ", 1)[0]
    return {
        cells[0]: cells[1].strip("`")
        for cells in ([c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines())
        if len(cells) >= 2 and cells[0] and not set(cells[0]) <= {"-", " "}
    }


def test_the_pins_agree_across_the_flag_table_the_trainer_dockerfile_and_the_docs() -> None:
    docker, docs, sources = _dockerfile_args(), _docs_pins(), DATA.sources
    assert docs["base image"] == f"{docker['MILES_BASE_IMAGE']}:{docker['MILES_BASE_TAG']}"
    assert docs["base image digest"] == docker["MILES_BASE_DIGEST"]
    assert docs["miles"] == sources["miles"]["commit"]
    assert docs["Megatron-LM"] == sources["megatron"]["commit"]
    assert docs["sgl-router-for-miles"] == sources["router"]["commit"]
    assert docs["SGLang"] == sources["sglang"]["version"]
    # The image clones Megatron's branch head when it is built: the pinned commit is the head at the tag's date.
    built = docker["MILES_BASE_TAG"].removeprefix("dev-")[:8]
    assert docs["Megatron-LM commit date"][:10].replace("-", "") <= built


@pytest.mark.parametrize("path", valid_examples(), ids=lambda p: p.stem)
def test_every_example_argv_uses_only_flags_miles_accepts(path: Path) -> None:
    doc = example(path.stem)
    assert check_argv(rendered(doc).job.miles_argv, DATA) == []


@pytest.mark.parametrize("path", valid_examples(), ids=lambda p: p.stem)
def test_every_example_argv_with_remote_rewards_uses_only_flags_miles_accepts(path: Path) -> None:
    doc = example(path.stem, {"reward": {"type": "remote", "remote": {"replicas": 1}}})
    assert check_argv(rendered(doc).job.miles_argv, DATA) == []


@PROPERTY
@given(valid_runs())
def test_generated_valid_specs_render_argvs_miles_accepts(doc: dict[str, Any]) -> None:
    result = rendered_or_assume(doc)
    assert check_argv(result.job.miles_argv, DATA) == []


def test_every_flag_the_operator_manages_is_a_flag_miles_knows() -> None:
    # A typo in planning/flags.py would let a user repeat the real flag in extraArgs unnoticed.
    assert [flag for flag in MANAGED_FLAGS if flag not in DATA.by_name] == []


def test_a_misspelt_flag_fails_naming_the_flag_and_the_miles_commit() -> None:
    argv = [*rendered(example("quickstart")).job.miles_argv, "--rollout-batchsize", "8"]
    (problem,) = check_argv(argv, DATA)
    assert problem.startswith("--rollout-batchsize: not a flag of miles radixark/miles@dec268f7")
    assert "did you mean --rollout-batch-size?" in problem


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--rollout-temperature", "hot"], "--rollout-temperature: 'hot' is not a float"),
        (["--num-rollout", "1.5"], "--num-rollout: '1.5' is not an int"),
        (["--attention-backend", "flashy"], "--attention-backend: 'flashy' is not one of"),
        (["--sglang-moe-runner-backend", "cuda"], "--sglang-moe-runner-backend: 'cuda' is not one of"),
        (["--hf-checkpoint"], "--hf-checkpoint: needs 1 value(s), got 0"),
        (["--kl-coef", "0.1", "--kl-loss-coef", "0.01"], "--kl-coef and --kl-loss-coef both non-zero: refused"),
        (["--save-interval", "5"], "--save-interval without --save: refused"),
        (["--sglang-dp-size", "2"], "--sglang-dp-size > 1 without --sglang-enable-dp-attention: refused"),
        (["--sglang-model-path", "/m"], "--sglang-model-path: not a flag"),  # miles skips it (the engine sets it)
    ],
)
def test_a_bad_value_or_a_refused_combination_fails_with_the_rule(extra: list[str], expected: str) -> None:
    problems = check_argv([*BASE, *extra], DATA)
    assert any(p.startswith(expected) for p in problems), problems


def test_a_missing_required_flag_fails() -> None:
    (problem,) = check_argv(["python3", "train.py", "--lr", "1e-6"], DATA)
    assert problem.startswith("--rollout-batch-size: required by miles radixark/miles@dec268f7")


def test_flags_that_take_no_value_or_many_values_parse_as_miles_parses_them() -> None:
    argv = [
        *BASE,
        "--colocate",
        "--eval-prompt-data",
        "aime",
        "/d/aime.jsonl",
        "--eval-interval",
        "5",
        "--no-offload-train",
        "--sglang-mem-fraction-static",
        "0.7",
        "--disable-bias-linear",
    ]
    assert check_argv(argv, DATA) == []


@pytest.mark.skipif(
    not os.environ.get("MILES_GIT"),
    reason="NOT CHECKED: the flag table was not regenerated from the pinned sources (set MILES_GIT, MEGATRON_GIT, "
    "ROUTER_GIT and SGLANG_WHEEL, or run make miles-flags with them)",
)
def test_the_committed_data_is_what_the_extractor_reads_from_the_pinned_sources() -> None:
    fresh = miles_flags.extract(
        Path(os.environ["MILES_GIT"]),
        Path(os.environ["MEGATRON_GIT"]),
        Path(os.environ["SGLANG_WHEEL"]),
        router_git=Path(os.environ["ROUTER_GIT"]),
    )
    committed = json.loads(miles_flags.DATA_FILE.read_text())
    assert json.loads(json.dumps(fresh["flags"])) == committed["flags"], "run make miles-flags"
    assert fresh["sources"] == committed["sources"], "run make miles-flags"


@pytest.mark.parametrize("path", valid_examples(), ids=lambda p: p.stem)
def test_a_hugging_face_export_renders_save_hf_inside_the_checkpoint_directory_and_miles_accepts_it(
    path: Path,
) -> None:
    doc = example(path.stem, {"export": {"huggingface": True}})
    argv = rendered(doc).job.miles_argv
    checkpoints = argv[argv.index("--save") + 1]
    assert argv[argv.index("--save-hf") + 1] == f"{checkpoints}/hf/iter_{{rollout_id:07d}}"
    assert check_argv(argv, DATA) == []
    assert "--save-hf" not in rendered(example(path.stem)).job.miles_argv
