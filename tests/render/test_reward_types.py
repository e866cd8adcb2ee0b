"""Every reward type the spec offers, run as miles runs it: the reward's return shape (miles's rm_hub, or our
remote client) through the conversion miles applies to it (docs/integrations/miles.md, "Reward types"), with
the flags the operator renders; and the min-reward guard's default floor following the reward's range."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import pytest
import yaml
from grpo_operator.api.spec import GRPORunSpec, RewardType
from grpo_operator.api.status import GuardMemory
from grpo_operator.cli import main
from grpo_operator.planning.plan import make_plan
from grpo_operator.render.job import job_submission
from grpo_operator.status.guards import degenerate
from grpo_operator.status.observation import TrainerMetrics

from tests.support.builders import SETTINGS, example, run_of

REMOTE = {"type": "remote", "remote": {"replicas": 1}}
PATCHES: dict[RewardType, dict[str, Any]] = {
    RewardType.DEEPSCALER: {"type": "deepscaler"},
    RewardType.DAPO: {"type": "dapo"},
    RewardType.MATH: {"type": "math"},
    RewardType.REMOTE: REMOTE,
}
# What each reward returns for a right and a wrong answer: deepscaler and math an int (rm_hub/deepscaler.py,
# rm_hub/__init__.py), dapo a dict (rm_hub/math_dapo_utils.py), our remote client a float.
RETURNS: dict[RewardType, tuple[Any, Any]] = {
    RewardType.DEEPSCALER: (1, 0),
    RewardType.DAPO: ({"score": 1.0, "acc": True, "pred": "42"}, {"score": -1.0, "acc": False, "pred": "41"}),
    RewardType.MATH: (1, 0),
    RewardType.REMOTE: (1.0, 0.0),
}


def _argv(reward: dict[str, Any]) -> list[str]:
    run = run_of(example("qwen3-4b-colocated", {"reward": reward}))
    return list(job_submission(run, make_plan(run), SETTINGS).miles_argv)


def _reward_key(argv: list[str]) -> str | None:
    return argv[argv.index("--reward-key") + 1] if "--reward-key" in argv else None


def _as_miles_converts(reward: Any, reward_key: str | None) -> float:
    """`Sample.get_reward_value` (miles/utils/types.py:175), then the float tensor of group normalisation
    (ray/rollout/train_data_conversion.py:161) and the zero-std metric's `round(r, 1)` (ray/rollout/metrics.py:170):
    a dict reaching either raises TypeError there, as it did for dapo without --reward-key."""
    value = reward if not reward_key else reward[reward_key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"float() argument must be a number, not {type(value).__name__!r}")
    round(value, 1)
    return float(value)


def test_every_reward_type_is_offered_here() -> None:
    assert set(PATCHES) == set(RewardType) == set(RETURNS)


@pytest.mark.parametrize("reward_type", list(RewardType), ids=str)
def test_each_rewards_scores_survive_miles_conversion_within_the_range_the_plan_states(reward_type: RewardType) -> None:
    argv = _argv(PATCHES[reward_type])
    right, wrong = (_as_miles_converts(r, _reward_key(argv)) for r in RETURNS[reward_type])
    spec = run_of(example("qwen3-4b-colocated", {"reward": PATCHES[reward_type]})).spec
    assert (wrong, right) == spec.reward.score_range


def test_a_dapo_run_renders_the_reward_key_miles_dapo_recipes_pass() -> None:
    argv = _argv({"type": "dapo"})
    assert argv[argv.index("--rm-type") :][:4] == ["--rm-type", "dapo", "--reward-key", "score"]
    assert "--reward-key" not in _argv({"type": "deepscaler"})


def _spec(reward: dict[str, Any], guards: dict[str, Any] | None = None) -> GRPORunSpec:
    patch: dict[str, Any] = {"reward": reward}
    if guards:
        patch["guards"] = guards
    return run_of(example("qwen3-4b-colocated", patch)).spec


def _trips(spec: GRPORunSpec, reward: float) -> str | None:
    trip = degenerate(GuardMemory(), spec.guards, TrainerMetrics(rollout=5, raw_reward=reward, repetition_frac=0.0))
    return None if trip is None else trip.message


def test_a_dapo_run_at_40_percent_accuracy_is_not_stopped_by_the_default_guard_and_a_collapsed_one_is() -> None:
    dapo = _spec({"type": "dapo"})
    assert _trips(dapo, -0.2) is None  # 40% right: 0.4 x 1 + 0.6 x -1
    message = _trips(dapo, -1.0)
    assert message is not None and "default -1 (the lowest score of the reward's range -1..1)" in message


def test_a_zero_to_one_reward_keeps_the_floor_at_zero_and_an_explicit_value_wins() -> None:
    assert _trips(_spec({"type": "deepscaler"}), 0.0) is not None
    assert _trips(_spec({"type": "deepscaler"}), 0.1) is None
    assert _trips(_spec({"type": "dapo"}, {"minReward": {"value": -0.5}}), -0.6) is not None


def test_a_reward_model_has_no_default_floor() -> None:
    spec = _spec({"type": "remote", "remote": {"replicas": 1, "backend": "reward_model"}})
    assert spec.reward.score_range is None and _trips(spec, -50.0) is None


def test_grpo_plan_shows_the_rewards_range_and_the_floor_the_guard_will_apply(tmp_path: Path) -> None:
    path = tmp_path / "dapo.yaml"
    path.write_text(yaml.safe_dump(example("qwen3-4b-colocated", {"reward": {"type": "dapo"}})))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["plan", "-f", str(path)])
    assert code == 0
    (row,) = [line for line in out.getvalue().splitlines() if line.startswith("reward ")]
    assert row.split(None, 1)[1] == (
        "dapo (scores -1..1); degenerate at or below guards.minReward.value default -1 "
        "(the lowest score of the reward's range -1..1)"
    )


def _plan_reward_row(tmp_path: Path, patch: dict[str, Any]) -> str:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(example("qwen3-4b-colocated", patch)))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["plan", "-f", str(path)]) == 0
    (row,) = [line for line in out.getvalue().splitlines() if line.startswith("reward ")]
    return row.split(None, 1)[1]


def test_grpo_plan_and_the_guard_name_an_explicit_floor_as_the_users_value(tmp_path: Path) -> None:
    patch = {"reward": {"type": "dapo"}, "guards": {"minReward": {"value": -0.5}}}
    row = _plan_reward_row(tmp_path, patch)
    assert row == "dapo (scores -1..1); degenerate at or below guards.minReward.value -0.5", row
    message = _trips(_spec(patch["reward"], patch["guards"]), -0.6)
    assert message is not None and "at or below guards.minReward.value -0.5 after" in message, message


def test_grpo_plan_says_a_reward_model_has_no_floor(tmp_path: Path) -> None:
    row = _plan_reward_row(
        tmp_path, {"reward": {"type": "remote", "remote": {"replicas": 1, "backend": "reward_model"}}}
    )
    assert row.endswith("no guards.minReward.value (a reward model's scores have no known floor)"), row
