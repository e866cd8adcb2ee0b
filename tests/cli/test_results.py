"""`grpo results` as a user reads it: the scores table, the checkpoint and the export from a run's status (the
command against a real API server is tests/integration/operator/test_evaluation.py), and `grpo validate` refusing
the eval-regression guard without an eval set, with exit 1 and one line."""

from __future__ import annotations

import json

import yaml
from grpo_operator.api.status import GRPORunStatus
from grpo_operator.cli.results import results_json, results_text

from tests.support.builders import base, merge
from tests.support.cli import grpo

STATUS = GRPORunStatus.model_validate_json(
    json.dumps(
        {
            "phase": "Succeeded",
            "reason": "Succeeded",
            "progress": "6/6",
            "evaluation": [
                {
                    "name": "aime",
                    "baseline": 0.25,
                    "baselineRollout": 0,
                    "best": 0.5,
                    "bestRollout": 1,
                    "last": 0.375,
                    "lastRollout": 3,
                    "truncatedRatio": 0.125,
                    "noneRewardRatio": 0.0,
                    "history": [
                        {"rollout": 0, "score": 0.25},
                        {"rollout": 1, "score": 0.5},
                        {"rollout": 3, "score": 0.375},
                    ],
                }
            ],
            "outputs": {
                "checkpointIteration": 5,
                "checkpointPath": "/fsx/c/iter_0000005",
                "huggingfacePath": "/fsx/c/hf/iter_0000005",
                "huggingfaceVerified": True,
            },
        }
    )
)


def test_results_prints_the_scores_the_checkpoint_and_the_export() -> None:
    assert results_text("r", STATUS).splitlines() == [
        "r: Succeeded/Succeeded, 6/6 rollouts",
        "eval set  baseline  best    last      truncated  none-reward",
        "aime      0.25 @0   0.5 @1  0.375 @3  0.125      0",
        "history aime (rollout:score): 0:0.25, 1:0.5, 3:0.375",
        "megatron checkpoint: iteration 5 in /fsx/c/iter_0000005",
        "hugging face export: /fsx/c/hf/iter_0000005 (verified)",
    ]


def test_results_json_is_the_status_evaluation_and_outputs_as_stored() -> None:
    found = json.loads(json.dumps(results_json("r", "ns", STATUS)))
    assert found["evaluation"][0]["best"] == 0.5 and found["outputs"]["huggingfaceVerified"] is True
    assert (found["name"], found["namespace"], found["phase"]) == ("r", "ns", "Succeeded")


def test_a_run_without_evaluation_says_so() -> None:
    text = results_text("r", GRPORunStatus.model_validate_json('{"phase": "Running"}'))
    assert "evaluation: none reported" in text and "megatron checkpoint: none reported yet" in text


def test_validate_refuses_the_eval_regression_guard_without_an_eval_set() -> None:
    doc = merge(base(), {"spec": {"guards": {"evalRegression": {"maxDrop": 0.05, "after": 2}}}})
    doc["spec"].pop("eval", None)
    result = grpo("validate", "-f", "-", stdin=yaml.safe_dump(doc))
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.strip().splitlines() == [
        "spec.guards.evalRegression: {maxDrop: 0.05, after: 2} needs spec.eval: without an eval set miles logs no eval "
        "score and the guard could never trip; add spec.eval (promptData, interval) or remove the guard"
    ]
