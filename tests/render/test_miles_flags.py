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
from grpo_dev.miles_flags import FlagData, check_argv, miles_parsers, parse_like_miles
from grpo_operator.cli.loading import parse_run
from grpo_operator.planning.flags import MANAGED_FLAGS
from grpo_operator.planning.miles_parser import joined_negative_values
from grpo_operator.planning.validation import errors, validate
from hypothesis import given

from tests.support.builders import example, rendered, valid_examples
from tests.support.fuzzing import PROPERTY, valid_runs
from tests.support.fuzzing import rendered as rendered_or_assume

REPO = Path(__file__).resolve().parents[2]
DATA = FlagData.load()
PARSERS = miles_parsers(DATA)
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
    argv = rendered(example(path.stem)).job.miles_argv
    assert check_argv(argv, DATA) == []
    assert parse_like_miles(argv, PARSERS) is None


@pytest.mark.parametrize("path", valid_examples(), ids=lambda p: p.stem)
def test_every_example_argv_with_remote_rewards_uses_only_flags_miles_accepts(path: Path) -> None:
    argv = rendered(example(path.stem, {"reward": {"type": "remote", "remote": {"replicas": 1}}})).job.miles_argv
    assert check_argv(argv, DATA) == []
    assert parse_like_miles(argv, PARSERS) is None


# extraArgs that miles's parsers take but the run cannot work with: grpo validate refuses them on its own rule.
NOT_PARSER_RULES = {
    "--pin-rollout-manager-to-head": "the rollout manager would wait for a CPU on the zero-CPU head",
    "--no-offload-train": "the memory plan of a colocated run counts the actor offloaded",
    "--no-offload-rollout": "the memory plan of a colocated run counts the engines offloaded",
    "--offload": "the memory plan decides offload from spec.topology.placement",
    "--lr": "managed: spec.training.learningRate",
}
QUICKSTART = list(rendered(example("quickstart")).job.miles_argv)
VARIANTS = [
    pytest.param(["--profile"], id="profile"),
    pytest.param(["--profile", "--log-passrate"], id="profile-then-a-flag"),
    pytest.param(["--profile", "train_overall"], id="profile-with-a-target"),
    pytest.param(["--rollout-top", "5"], id="ambiguous-abbreviation"),
    pytest.param(["--lr-dec", "cosine"], id="unique-abbreviation"),
    pytest.param(["--sav", "/x"], id="abbreviation-of-save"),
    pytest.param(["--adam-eps", "-1e-8"], id="negative-exponent"),
    pytest.param(["--adam-eps=-1e-8"], id="negative-exponent-joined"),
    pytest.param(["--lr-warmup-iters", "-5"], id="plain-negative"),
    pytest.param(["--rampup-batch-size", "8", "-1e3", "1000"], id="negative-exponent-among-several"),
    pytest.param(["--rampup-batch-size", "8", "16", "1000"], id="three-values"),
    pytest.param(["--sglang-load-format", "nonsense"], id="not-a-choice"),
    pytest.param(["--sglang-load-format", "safetensors"], id="a-choice"),
    pytest.param(["--empty-unused-memory-level", "3"], id="not-an-int-choice"),
    pytest.param(["--rollout-top-k", "abc"], id="not-an-int"),
    pytest.param(["--rollout-top-k=abc"], id="not-an-int-joined"),
    pytest.param(["--rollout-top-k", "20"], id="an-int"),
    pytest.param(["--rollout-temperature-x", "1"], id="unknown"),
    pytest.param(["--sglang-lora-paths", "a", "b"], id="nargs-star"),
    pytest.param(["--sglang-lora-paths"], id="nargs-star-empty"),
    pytest.param(["--log-passrate=1"], id="value-to-a-switch"),
    pytest.param(["--help"], id="help"),
    pytest.param(["--pin-rollout-manager-to-head"], id="pin-to-head"),
    pytest.param(["--no-offload-train"], id="no-offload-train"),
    pytest.param(["--no-offload-rollout"], id="no-offload-rollout"),
    pytest.param(["--offload"], id="offload"),
    pytest.param(["--lr", "1e-5"], id="managed"),
]


@pytest.mark.parametrize("extra", VARIANTS)
def test_grpo_validate_refuses_an_extra_arg_iff_miles_parsers_do_or_the_run_could_not_work(extra: list[str]) -> None:
    doc = example("quickstart", {"extraArgs": extra})
    run, problems = parse_run(doc)
    refused_by_validate = bool(problems) if run is None else bool(errors(validate(run)))
    # The render appends extraArgs last, negative values joined; a refused run is not rendered, so its argv
    # is built the same way here.
    argv = rendered(doc).job.miles_argv if not refused_by_validate else [*QUICKSTART, *joined_negative_values(extra)]
    refused_by_miles = parse_like_miles(argv, PARSERS)
    if extra[0] in NOT_PARSER_RULES:
        assert refused_by_validate and refused_by_miles is None, (refused_by_miles, NOT_PARSER_RULES[extra[0]])
    else:
        assert refused_by_validate == (refused_by_miles is not None), refused_by_miles


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
    ids=[
        "a word for a float",
        "a fraction for an int",
        "an unknown choice",
        "an unknown MoE runner",
        "a flag without its value",
        "two KL coefficients",
        "a save interval without --save",
        "dp size without dp attention",
        "a flag miles skips",
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
