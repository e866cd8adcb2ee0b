"""spec.extraArgs read as miles's two parsers read them: its pre-parser's abbreviations, negative numbers in
exponent form, each value's type and choices, flags of several values, and flags the run cannot work with
(the rollout manager pinned to the zero-CPU head, offload the memory plan decides). Each refusal is one line
of `grpo validate` naming the field, the value, the rule and the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from grpo_operator.cli import main

from tests.support.builders import example, rendered


def _validate(extra: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    """`grpo validate -f` in this process (an exception would fail the test): exit code and printed lines."""
    path = tmp_path / "run.json"  # JSON quotes every string, as kubectl sends it
    path.write_text(json.dumps(example("quickstart", {"extraArgs": extra})))
    code = main(["validate", "-f", str(path)])
    out = capsys.readouterr()
    return code, out.out.splitlines() + out.err.splitlines()


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        pytest.param(
            ["--profile"],
            "spec.extraArgs[0]: --profile is read by miles's pre-parser (miles/utils/arguments.py:2377-2379, "
            "argparse's default allow_abbrev) as its --profile-target, and it exits 2 before training",
            id="a-megatron-flag-the-pre-parser-expands-to-a-miles-flag-without-its-value",
        ),
        pytest.param(
            ["--rollout-top", "5"],
            "spec.extraArgs[0]: --rollout-top is an abbreviation: miles's pre-parser (miles/utils/arguments.py:"
            "2377-2379, argparse's default allow_abbrev) finds it ambiguous (--rollout-top-k, --rollout-top-p) and "
            "exits 2; write the full flag: --rollout-top-k, --rollout-top-p",
            id="an-abbreviation-ambiguous-to-the-pre-parser",
        ),
        pytest.param(
            ["--lr-dec", "cosine"],
            "spec.extraArgs[0]: --lr-dec is an abbreviation: Megatron's parser (allow_abbrev=False, "
            "megatron/training/arguments.py:88-90) does not expand it and exits 2; write the full flag: "
            "--lr-decay-iters, --lr-decay-samples, --lr-decay-style",
            id="an-abbreviation-megatron-does-not-expand",
        ),
        pytest.param(
            ["--sglang-load-format", "nonsense"],
            "spec.extraArgs[1]: nonsense is not a choice of --sglang-load-format: miles's parser exits 2 at it; "
            "write one of auto, pt, safetensors,",
            id="a-value-outside-the-choices",
        ),
        pytest.param(
            ["--rollout-top-k", "abc"],
            "spec.extraArgs[1]: abc is not an int, which --rollout-top-k takes: miles's parser exits 2 at it; "
            "write an int",
            id="a-value-of-the-wrong-type",
        ),
        pytest.param(
            ["--rollout-top-k=abc"],
            "spec.extraArgs[0]: --rollout-top-k=abc: abc is not an int, which --rollout-top-k takes",
            id="an-inline-value-of-the-wrong-type",
        ),
        pytest.param(
            ["--rampup-batch-size", "8", "-1e3", "1000"],
            "spec.extraArgs[2]: -1e3: argparse reads it as a flag, not as a value of --rampup-batch-size, which "
            "takes several values",
            id="a-negative-exponent-value-among-several",
        ),
        pytest.param(
            ["--offload-rollout-level", "kv_cache"],
            "spec.extraArgs[0]: --offload-rollout-level is managed by the operator; set spec.topology.placement",
            id="offload-levels-the-memory-plan-counts",
        ),
        pytest.param(
            ["--pin-rollout-manager-to-head"],
            "spec.extraArgs[0]: --pin-rollout-manager-to-head is refused: it pins miles's rollout manager, an actor "
            "asking 1 CPU (miles/ray/placement_group.py:188-190), to the Ray head, which the operator starts with "
            "no CPUs for Ray",
            id="the-rollout-manager-pinned-to-the-zero-cpu-head",
        ),
        pytest.param(
            ["--no-offload-train"],
            "spec.extraArgs[0]: --no-offload-train is managed by the operator (an alias of --offload-train, the "
            "same setting); set spec.topology.placement (Colocated offloads the actor and the engines",
            id="no-offload-train-on-a-colocated-plan",
        ),
        pytest.param(
            ["--no-offload-rollout"],
            "spec.extraArgs[0]: --no-offload-rollout is managed by the operator (an alias of --offload-rollout",
            id="no-offload-rollout-on-a-colocated-plan",
        ),
        pytest.param(
            ["--offload"],
            "spec.extraArgs[0]: --offload is managed by the operator; set spec.topology.placement",
            id="offload-both",
        ),
    ],
)
def test_an_extra_arg_miles_refuses_or_the_run_cannot_work_with_is_one_line_naming_the_rule(
    extra: list[str], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines = _validate(extra, tmp_path, capsys)
    assert code == 1 and len(lines) == 1 and lines[0].startswith(expected), lines


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param(["--sglang-lora-paths", "a", "b"], id="several-values-of-a-nargs-star-flag"),
        pytest.param(["--adam-eps", "-1e-8"], id="a-negative-exponent-value-of-a-one-value-flag"),
        pytest.param(["--rollout-top-k", "20", "--sglang-load-format", "safetensors"], id="a-typed-and-a-chosen-value"),
    ],
)
def test_extra_args_miles_takes_validate(extra: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = _validate(extra, tmp_path, capsys)
    assert code == 0, lines


def test_a_negative_number_in_exponent_form_is_rendered_joined_to_its_flag() -> None:
    # argparse reads `-1e-8` after a flag as another flag (CPython 3.12 `_negative_number_matcher`).
    argv = rendered(example("quickstart", {"extraArgs": ["--adam-eps", "-1e-8", "--lr-warmup-iters", "-5"]})).job
    assert list(argv.miles_argv[-2:]) == ["--adam-eps=-1e-8", "--lr-warmup-iters=-5"]
