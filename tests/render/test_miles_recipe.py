"""The miles argv trains as miles's own recipes do (miles scripts/run_qwen3_4b.py:221-228 at dec268f7), and those
flags are the operator's: `spec.extraArgs` may not repeat them."""

from __future__ import annotations

from pathlib import Path

import pytest
from grpo_operator.cli.loading import parse_run
from grpo_operator.planning.validation import errors, validate

from tests.support.builders import example, rendered, valid_examples


def _last_value(argv: tuple[str, ...], flag: str) -> str | None:
    positions = [i for i, a in enumerate(argv) if a == flag]
    return argv[positions[-1] + 1] if positions else None


@pytest.mark.parametrize("path", valid_examples(), ids=lambda p: p.stem)
def test_every_example_trains_without_megatrons_default_dropout_with_fp32_softmax_and_flash_attention(
    path: Path,
) -> None:
    argv = rendered(example(path.stem)).job.miles_argv
    assert _last_value(argv, "--attention-dropout") == "0.0"
    assert _last_value(argv, "--hidden-dropout") == "0.0"
    assert _last_value(argv, "--attention-backend") == "flash"
    assert "--attention-softmax-in-fp32" in argv
    assert "--accumulate-allreduce-grads-in-fp32" in argv


@pytest.mark.parametrize(
    "args",
    [["--hidden-dropout", "0.1"], ["--attention-dropout=0.1"], ["--attention-backend", "auto"]],
    ids=["--hidden-dropout", "--attention-dropout=", "--attention-backend"],
)
def test_recipe_flags_in_extra_args_are_refused_naming_the_recipe(args: list[str]) -> None:
    run, problems = parse_run(example("quickstart", {"extraArgs": args}))
    assert run is not None, problems
    (problem,) = errors(validate(run))
    assert str(problem) == (
        f"spec.extraArgs[0]: {args[0]} is fixed by the operator (miles's recipe for these models, "
        "scripts/run_qwen3_4b.py:221-228); remove it from extraArgs"
    )


def test_remote_rewards_go_through_our_reward_client_with_the_services_deadline() -> None:
    doc = example("quickstart", {"reward": {"type": "remote", "remote": {"replicas": 1, "timeoutSeconds": 7.5}}})
    job = rendered(doc).job
    assert _last_value(job.miles_argv, "--custom-rm-path") == "grpo_launcher.reward_client.reward"
    assert job.runtime_env["env_vars"]["GRPO_REWARD_DEADLINE_S"] == "7.5"
    assert "--custom-rm-path" not in rendered(example("quickstart")).job.miles_argv  # rule-based rewards


def test_the_reward_client_flag_is_refused_in_extra_args() -> None:
    run, problems = parse_run(example("quickstart", {"extraArgs": ["--custom-rm-path", "x.y"]}))
    assert run is not None, problems
    assert [str(p) for p in errors(validate(run))] == [
        "spec.extraArgs[0]: --custom-rm-path is managed by the operator; set spec.reward.type instead"
    ]
