"""Held-out evaluation as a user reads it in status.evaluation, and the reward-hacking guard's edges: a drop
exactly at guards.evalRegression.maxDrop is no regression, one evaluation short of `after` does not trip, an
evaluation whose rewards were mostly None is a warning and not a score, and a falling training reward is no
reward hacking."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from grpo_operator.api.status import ConditionType, Phase, Reason
from grpo_operator.cli.loading import parse_run
from grpo_operator.edges.scrape import trainer_metrics
from grpo_operator.planning.validation import validate
from grpo_operator.status import summary
from grpo_operator.status.decision import StopJob
from grpo_operator.status.observation import EvalReading, JobState, Outputs, RunSummary, TrainerMetrics

from tests.support.builders import base, merge
from tests.support.status import READY, T0, at, cond, intent, job, run_through, spec

EVAL = {"eval": {"name": "aime", "promptData": "/fsx/data/aime.jsonl", "interval": 2}}


def _guarded(max_drop: float = 0.05, after: int = 2, action: str = "Stop") -> dict[str, Any]:
    return {**EVAL, "guards": {"action": action, "evalRegression": {"maxDrop": max_drop, "after": after}}}


def _evals(*points: tuple[float, float] | tuple[float, float, float], none: float = 0.0) -> list[Any]:
    """One scrape per (score, training reward[, none ratio]): evaluation i after rollout 2i."""
    out = []
    for i, point in enumerate(points):
        score, reward = point[0], point[1]
        ratio = point[2] if len(point) > 2 else none  # type: ignore[misc]
        metrics = TrainerMetrics(
            rollout=2 * i, raw_reward=reward, evals=(EvalReading("aime", 2 * i, score, 0.0, ratio),)
        )
        out.append(at(T0 + timedelta(seconds=i), cluster=READY, job=job(JobState.RUNNING), metrics=metrics))
    return out


@pytest.mark.parametrize(
    ("points", "want"),
    [
        pytest.param(
            [(0.6, 0.5), (0.55, 0.6), (0.55, 0.7)], Reason.RUNNING, id="exactly-maxDrop-below-is-no-regression"
        ),
        pytest.param([(0.6, 0.5), (0.5, 0.6)], Reason.RUNNING, id="one-evaluation-short-of-after"),
        pytest.param([(0.6, 0.5), (0.5, 0.6), (0.5, 0.7)], Reason.EVAL_REGRESSED, id="after-evaluations-past-maxDrop"),
        pytest.param(
            [(0.6, 0.5), (0.5, 0.6), (0.1, 0.7, 0.9), (0.5, 0.7)],
            Reason.EVAL_REGRESSED,
            id="a-none-heavy-evaluation-between-neither-counts-nor-breaks-the-streak",
        ),
        pytest.param(
            [(0.6, 0.5), (0.5, 0.6), (0.1, 0.7, 0.9)], Reason.RUNNING, id="a-none-heavy-evaluation-is-not-counted"
        ),
        pytest.param([(0.6, 0.5), (0.5, 0.4), (0.5, 0.3)], Reason.RUNNING, id="the-training-reward-fell-too"),
        pytest.param(
            [(0.6, 0.5), (0.5, 0.6), (0.58, 0.7), (0.5, 0.8)], Reason.RUNNING, id="a-recovery-resets-the-count"
        ),
    ],
)
def test_the_eval_regression_guard_at_its_edges(points: list[Any], want: Reason) -> None:
    d = run_through(intent(spec(_guarded()), evidence_config_map="x-f-1"), *_evals(*points))
    assert d.status.reason == want


def test_a_tripped_eval_regression_stops_the_job_with_its_evidence_and_fails_the_run() -> None:
    d = run_through(intent(spec(_guarded()), evidence_config_map="x-f-1"), *_evals((0.6, 0.5), (0.5, 0.6), (0.5, 0.7)))
    assert (d.status.phase, d.status.reason) == (Phase.FAILED, Reason.EVAL_REGRESSED)
    assert cond(d, ConditionType.HEALTHY) == ("False", Reason.EVAL_REGRESSED)
    assert d.has(StopJob) and [b.trigger for b in d.status.forensics or []] == [Reason.EVAL_REGRESSED]
    assert "eval/aime 0.5 at rollout 4" in (d.status.message or "") and "best 0.6 (rollout 0)" in (
        d.status.message or ""
    )


def test_under_warn_a_tripped_eval_regression_keeps_the_run_and_warns() -> None:
    d = run_through(
        intent(spec(_guarded(action="Warn")), evidence_config_map="x-f-1"), *_evals((0.6, 0.5), (0.5, 0.6), (0.5, 0.7))
    )
    assert (d.status.phase, d.status.reason) == (Phase.RUNNING, Reason.EVAL_REGRESSED)
    assert not d.has(StopJob) and any("guards.evalRegression.maxDrop" in w for w in d.warnings)


def test_status_evaluation_holds_baseline_best_last_the_ratios_and_the_history() -> None:
    d = run_through(intent(spec(EVAL), evidence_config_map="x-f-1"), *_evals((0.3, 0.1), (0.45, 0.2), (0.4, 0.3)))
    (aime,) = d.status.evaluation or []
    assert (aime.name, aime.baseline, aime.baseline_rollout, aime.best, aime.best_rollout) == ("aime", 0.3, 0, 0.45, 2)
    assert (aime.last, aime.last_rollout, aime.truncated_ratio, aime.none_reward_ratio) == (0.4, 4, 0.0, 0.0)
    assert [(p.rollout, p.score, p.train_reward) for p in aime.history] == [
        (0, 0.3, 0.1),
        (2, 0.45, 0.2),
        (4, 0.4, 0.3),
    ]


def test_the_history_keeps_the_last_twenty_evaluations() -> None:
    d = run_through(intent(spec(EVAL), evidence_config_map="x-f-1"), *_evals(*[(i / 100, 0.5) for i in range(25)]))
    (aime,) = d.status.evaluation or []
    assert [p.rollout for p in aime.history] == [2 * i for i in range(5, 25)] and aime.baseline == 0.0


def test_an_evaluation_with_mostly_none_rewards_is_a_warning_event_not_a_score() -> None:
    d = run_through(intent(spec(EVAL), evidence_config_map="x-f-1"), *_evals((0.3, 0.1), (0.05, 0.2, 0.8)))
    (aime,) = d.status.evaluation or []
    assert (aime.last, aime.not_scored_rollout, aime.none_reward_ratio, len(aime.history)) == (0.3, 2, 0.8, 1)
    assert [reason for reason, _ in d.alerts] == [Reason.EVAL_NOT_SCORED]


@pytest.mark.parametrize(
    ("patch", "refused"),
    [
        pytest.param({"guards": {"evalRegression": {"maxDrop": 0.05}}}, True, id="without-spec-eval"),
        pytest.param(_guarded(), False, id="with-spec-eval"),
    ],
)
def test_validation_refuses_the_guard_without_an_eval_set(patch: dict[str, Any], refused: bool) -> None:
    doc = merge(base(), {"spec": patch})
    doc["spec"].pop("eval", None) if "eval" not in patch else None  # the base example evaluates
    run, _ = parse_run(doc)
    assert run is not None
    problems = [str(p) for p in validate(run) if p.path == "spec.guards.evalRegression"]
    assert bool(problems) == refused and all("needs spec.eval" in p for p in problems)


SCRAPE = """# HELP miles_metric_rollout_step rollout/step
# TYPE miles_metric_rollout_step gauge
miles_metric_rollout_step{run_name="r"} 4.0
# HELP miles_metric_eval_math_500 eval/math-500
# TYPE miles_metric_eval_math_500 gauge
miles_metric_eval_math_500{run_name="r"} 0.625
# HELP miles_metric_eval_math_500_truncated_ratio eval/math-500-truncated_ratio
# TYPE miles_metric_eval_math_500_truncated_ratio gauge
miles_metric_eval_math_500_truncated_ratio{run_name="r"} 0.125
# HELP miles_metric_eval_math_500_none_reward_ratio eval/math-500-none_reward_ratio
# TYPE miles_metric_eval_math_500_none_reward_ratio gauge
miles_metric_eval_math_500_none_reward_ratio{run_name="r"} 0.0
# HELP miles_metric_eval_math_500_pass_at_1 eval/math-500-pass@1
# TYPE miles_metric_eval_math_500_pass_at_1 gauge
miles_metric_eval_math_500_pass_at_1{run_name="r"} 0.5
# HELP miles_metric_eval_step eval/step
# TYPE miles_metric_eval_step gauge
miles_metric_eval_step{run_name="r"} 3.0
"""


def test_the_scrape_reads_each_eval_set_by_the_key_miles_documents_its_gauge_with() -> None:
    seen = trainer_metrics(SCRAPE, "r")
    assert (seen.rollout, seen.evals) == (4, (EvalReading("math-500", 3, 0.625, 0.125, 0.0),))
    assert trainer_metrics(SCRAPE, "another-run").evals == ()


def test_the_run_summary_carries_the_evaluations_and_the_outputs() -> None:
    line = (
        'GRPO_RUN_SUMMARY {"version": 1, "exit_code": 0, "rollouts": [], "evals": [{"rollout": 0, "name": "aime", '
        '"score": 0.25, "truncated_ratio": 0.5, "none_reward_ratio": 0.0}, "junk"], "outputs": {"checkpoint_iteration":'
        ' 9, "checkpoint_path": "/fsx/c/iter_0000009", "huggingface_path": "/fsx/c/hf/iter_0000009", '
        '"huggingface_verified": true}}'
    )
    parsed = summary.parse(line)
    assert parsed is not None and parsed.evals == (EvalReading("aime", 0, 0.25, 0.5, 0.0),)
    assert parsed.outputs == Outputs(9, "/fsx/c/iter_0000009", "/fsx/c/hf/iter_0000009", True)


def _ended(export: bool, outputs: Outputs | None) -> tuple[Phase | None, str | None]:
    s = spec({"rollout": {"numRollout": 1}, "export": {"huggingface": export}})
    last = TrainerMetrics(rollout=0, raw_reward=0.5, repetition_frac=0.0)
    done = RunSummary(exit_code=0, last_rollout=0, rollouts=(last,), outputs=outputs)
    d = run_through(intent(s), at(cluster=READY, job=job(JobState.SUCCEEDED), summary=done))
    return d.status.phase, d.status.reason


@pytest.mark.parametrize(
    ("export", "outputs", "want"),
    [
        pytest.param(True, Outputs(0, "/c/iter_0000000", "/c/hf/iter_0000000", True), Phase.SUCCEEDED, id="verified"),
        pytest.param(True, Outputs(0, "/c/iter_0000000", "/c/hf/iter_0000000", False), Phase.FAILED, id="incomplete"),
        pytest.param(True, None, Phase.FAILED, id="not-reported"),
        pytest.param(False, None, Phase.SUCCEEDED, id="not-requested"),
    ],
)
def test_success_with_an_export_requested_needs_the_export_verified(
    export: bool, outputs: Outputs | None, want: Phase
) -> None:
    phase, reason = _ended(export, outputs)
    assert phase == want and reason == (Reason.EXPORT_MISSING if want is Phase.FAILED else Reason.SUCCEEDED)


def test_status_outputs_name_the_last_checkpoint_and_the_export() -> None:
    s = spec({"rollout": {"numRollout": 1}})
    done = RunSummary(
        exit_code=0,
        last_rollout=0,
        rollouts=(TrainerMetrics(rollout=0, raw_reward=0.5),),
        outputs=Outputs(0, "/c/iter_0000000", None, None),
    )
    d = run_through(intent(s), at(cluster=READY, job=job(JobState.SUCCEEDED), summary=done))
    assert d.status.outputs is not None and (
        d.status.outputs.checkpoint_iteration,
        d.status.outputs.checkpoint_path,
    ) == (
        0,
        "/c/iter_0000000",
    )


def test_evaluations_no_scrape_caught_take_their_place_from_the_end_of_run_summary() -> None:
    s = spec({**EVAL, "rollout": {"numRollout": 5}})
    scraped = _evals((0.3, 0.1), (0.4, 0.2), (0.35, 0.3))[2]  # only the evaluation after rollout 4 was scraped
    readings = tuple(EvalReading("aime", r, score, 0.0, 0.0) for r, score in ((0, 0.3), (2, 0.45), (4, 0.35)))
    rollouts = tuple(TrainerMetrics(rollout=r, raw_reward=0.5) for r in range(5))
    done = RunSummary(exit_code=0, last_rollout=4, rollouts=rollouts, evals=readings)
    end = at(T0 + timedelta(seconds=9), cluster=READY, job=job(JobState.SUCCEEDED), summary=done)
    (aime,) = run_through(intent(s), scraped, end).status.evaluation or []
    assert [(p.rollout, p.score) for p in aime.history] == [(0, 0.3), (2, 0.45), (4, 0.35)]
    assert (aime.baseline_rollout, aime.best, aime.best_rollout, aime.last, aime.last_rollout) == (0, 0.45, 2, 0.35, 4)
