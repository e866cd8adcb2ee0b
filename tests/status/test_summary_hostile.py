"""The operator reads the launcher's end-of-run summary line from a job log a user's code also writes to: what
it takes from a malformed or oversized line is bounded and typed, since it becomes the run's reason, message,
metrics and provenance."""

from __future__ import annotations

import json
from typing import Any

from grpo_operator.status.observation import Failure, TrainerMetrics
from grpo_operator.status.summary import parse


def line(**fields: Any) -> str:
    return "GRPO_RUN_SUMMARY " + json.dumps({"version": 1, **fields})


def test_rollout_entries_without_an_integer_rollout_are_dropped_and_booleans_are_not_numbers() -> None:
    summary = parse(line(rollouts=["junk", {"rollout": "3"}, {"raw_reward": 1}, {"rollout": 2, "raw_reward": True}]))
    assert summary is not None
    assert summary.rollouts == (TrainerMetrics(2, None, None, None, None),)


def test_only_the_last_hundred_rollouts_are_kept() -> None:
    summary = parse(line(rollouts=[{"rollout": i, "raw_reward": 0.5} for i in range(150)]))
    assert summary is not None
    assert [r.rollout for r in summary.rollouts] == list(range(50, 150))


def test_a_failure_reason_that_is_not_one_word_is_ignored() -> None:
    summary = parse(line(failure={"reason": "Reward Failed; see logs", "message": "x"}))
    assert summary is not None and summary.failure is None


def test_a_failure_reason_and_message_are_cut_to_what_a_status_can_hold() -> None:
    summary = parse(line(failure={"reason": "R" * 100, "message": "word " * 400}))
    assert summary is not None and summary.failure is not None
    assert summary.failure == Failure("R" * 64, ("word " * 400).strip()[:1000])


def test_a_failure_without_a_message_has_an_empty_one() -> None:
    summary = parse(line(failure={"reason": "OutOfMemory"}))
    assert summary is not None and summary.failure == Failure("OutOfMemory", "")


def test_provenance_values_are_cut_to_256_characters() -> None:
    summary = parse(line(provenance={"ray": "9" * 300}))
    assert summary is not None and summary.provenance == {"ray": "9" * 256}


def test_the_last_well_formed_summary_line_wins_over_a_later_broken_or_foreign_one() -> None:
    log = "\n".join(
        [line(exit_code=1, last_rollout=4), "GRPO_RUN_SUMMARY {not json", line(version=2, exit_code=9), "done"]
    )
    summary = parse(log)
    assert summary is not None and (summary.exit_code, summary.last_rollout) == (1, 4)
    assert parse("GRPO_RUN_SUMMARY [1, 2]") is None


def test_a_later_json_line_of_the_users_code_without_the_mark_is_not_taken_for_the_summary() -> None:
    users = "my own summary: " + json.dumps({"version": 1, "exit_code": 3, "last_rollout": 99})
    summary = parse("\n".join([line(exit_code=0, first_rollout=0, last_rollout=19), users]))
    assert summary is not None and (summary.exit_code, summary.last_rollout) == (0, 19)


def test_a_boolean_or_a_string_is_not_taken_for_an_exit_code_or_a_rollout() -> None:
    summary = parse(line(exit_code=True, first_rollout="0", last_rollout=19.0))
    assert summary is not None
    assert (summary.exit_code, summary.first_rollout, summary.last_rollout) == (None, None, None)
