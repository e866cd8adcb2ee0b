"""The values a miles metrics line can hold, as the summary line reports them: a negative reward keeps its sign,
a NaN or infinity miles logged is no reading (null) without being called unreadable, a value that is not one
number (a string, an array of several) is unreadable and named in ``dropped_keys``, and a line whose dict is empty
or written without spaces still counts its rollout."""

from __future__ import annotations

from grpo_launcher.summary import RolloutLog, parse_metrics_line_keys, summary_line
from grpo_operator.status import summary as operator_summary


def _snapshot(*lines: str) -> dict[str, object]:
    log = RolloutLog()
    for line in lines:
        log.feed(line)
    return log.snapshot()


def test_a_negative_reward_keeps_its_sign_in_the_summary_the_operator_reads() -> None:
    # A reward model's score or a penalised format can be below zero; numpy 2 prints np.float64(-0.25).
    log = RolloutLog()
    log.feed("rollout 4: {'rollout/raw_reward': -0.5, 'rollout/repetition_frac': 0.0}")
    log.feed("rollout 5: {'rollout/raw_reward': np.float64(-0.25), 'rollout/truncated_ratio': -0.0}")
    summary = operator_summary.parse(summary_line(0, log, {}, None))
    assert summary is not None and summary.last is not None
    assert [r.raw_reward for r in summary.rollouts] == [-0.5, -0.25]
    assert log.snapshot()["dropped_keys"] == []


def test_a_nan_or_infinity_miles_logged_is_no_reading_and_not_an_unreadable_key() -> None:
    # A nan or inf in miles's dict is a value miles computed, not a line the reader failed to understand: the
    # field is null, and dropped_keys (which says the log's format was not understood) stays empty.
    snap = _snapshot(
        "rollout 6: {'rollout/raw_reward': nan, 'rollout/repetition_frac': np.nan, 'rollout/truncated_ratio': 0.25}",
        "perf 6: {'perf/step_time': math.inf}",
    )
    assert snap["rollouts"] == [
        {"rollout": 6, "raw_reward": None, "repetition_frac": None, "truncated_ratio": 0.25, "step_time_seconds": None}
    ]
    assert snap["dropped_keys"] == []


def test_a_value_that_is_not_one_number_is_unreadable_and_named() -> None:
    parsed = parse_metrics_line_keys(
        "rollout 7: {'rollout/raw_reward': array([0.5, 0.75]), 'rollout/repetition_frac': 'n/a', "
        "'rollout/truncated_ratio': array([0.125])}"
    )
    assert parsed == (7, {"truncated_ratio": 0.125}, ["rollout/raw_reward", "rollout/repetition_frac"])


def test_an_empty_metrics_dict_counts_its_rollout_and_reports_nothing_unreadable() -> None:
    snap = _snapshot("rollout 8: {}", "perf 8: {'perf/step_time': 3.0}", "rollout 9: {}")
    assert (snap["first_rollout"], snap["last_rollout"], snap["rollouts_logged"]) == (8, 9, 2)
    assert snap["dropped_keys"] == []


def test_a_metrics_dict_written_without_spaces_is_read_the_same() -> None:
    # Not how Python's repr writes a dict, but how json.dumps(..., separators=(",", ":")) does.
    compact = parse_metrics_line_keys("perf 10: {'rollout/repetition_frac':0.125,'perf/step_time':12.5}")
    spaced = parse_metrics_line_keys("perf 10: {'rollout/repetition_frac': 0.125, 'perf/step_time': 12.5}")
    assert compact == spaced == (10, {"repetition_frac": 0.125, "step_time_seconds": 12.5}, [])
