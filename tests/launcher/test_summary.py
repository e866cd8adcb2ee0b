"""The end-of-run record: the launcher reads miles's own rollout lines and prints one GRPO_RUN_SUMMARY line that
the operator's parser reads back (the contract in ``grpo_launcher.summary``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from grpo_launcher.summary import RolloutLog, parse_metrics_line, parse_metrics_line_keys, read_failure, summary_line
from grpo_operator.status import summary as operator_summary

from tests.support.launcher import base_config, launcher, write_config

# Lines as miles dec268f7 writes them: logging's stderr handler with the format of `configure_logger_raw`
# (miles/utils/logging_utils.py:33-38: `[time name] file:line - message`), the name a process identity
# (utils/audit_utils/process_identity.py: `rollout_manager`, `actor_cell0_rank0`), forwarded by Ray to the
# driver's output behind its coloured `(ActorName pid=...)` prefix. The training actor's `rollout <id>:` line
# (backends/training_utils/log_utils.py:66), the rollout manager's `perf <id>:` (ray/rollout/metrics.py:79, with
# `--log-passrate` a numpy value: metrics.py:74-78) and the actor's `perf <id>:` (utils/train_metric_utils.py:50).
MILES_LIKE = r"""
import json, os, sys
RM = "\x1b[36m(RolloutManager pid=41)\x1b[0m"
ACTOR = "\x1b[36m(MegatronTrainRayActor pid=42)\x1b[0m"
for i in range(3):
    print(f"{RM} [2026-12-01 08:00:0{i}.000 rollout_manager] metrics.py:79 - perf {i}: "
          f"{{'rollout/response_len/mean': 812.5, 'rollout/repetition_frac': {0.1 * i}, 'rollout/truncated_ratio': 0.0, 'perf/rollout_time': 3.2, 'passrate/pass@1': np.float64(0.25)}}", file=sys.stderr, flush=True)
    print(f"{ACTOR} [2026-12-01 08:00:0{i}.500 actor_cell0_rank0] log_utils.py:66 - rollout {i}: "
          f"{{'rollout/raw_reward': {0.25 * i}, 'rollout/log_probs': -0.5, 'rollout/kl': nan}}", file=sys.stderr, flush=True)
    print(f"{ACTOR} [2026-12-01 08:00:0{i}.600 actor_cell0_rank0] train_metric_utils.py:50 - perf {i}: {{'perf/step_time': 12.0, 'perf/train_time': 9.0}}", file=sys.stderr, flush=True)
if os.environ.get("FAIL_LINE"):  # a Ray actor without the driver's env prints it instead (forwarded by Ray)
    print('(RolloutManager pid=41) GRPO_FAILURE {"reason": "RewardServiceFailed", "message": "from an actor"}', flush=True)
    sys.exit(1)
if os.environ.get("FAIL"):
    open(os.environ["GRPO_FAILURE_FILE"], "w").write(json.dumps({"reason": "RewardServiceFailed", "message": "reward\nservice down"}))
    sys.exit(1)
"""


def _run(tmp_path: Path, **env: str) -> list[str]:
    script = tmp_path / "train.py"
    script.write_text(MILES_LIKE)
    config = write_config(tmp_path, base_config(tmp_path))
    proc = launcher("run", "--skip-preflight", "--config", str(config), "--", sys.executable, str(script), env=env)
    return proc.stdout.splitlines()


def test_the_last_line_is_the_summary_with_the_real_last_rollout_and_the_operator_reads_it(tmp_path: Path) -> None:
    lines = _run(tmp_path)
    assert lines[-1].startswith("GRPO_RUN_SUMMARY ")
    # miles's output passes through (stderr, as miles writes it: captured beside stdout here)
    parsed = operator_summary.parse("\n".join(lines))
    assert parsed is not None and parsed.exit_code == 0 and parsed.last_rollout == 2 and parsed.failure is None
    assert parsed.first_rollout == 0  # where this job started: status.accounting's resume point
    assert parsed.last is not None
    assert (
        parsed.last.rollout,
        parsed.last.raw_reward,
        parsed.last.repetition_frac,
        parsed.last.step_time_seconds,
    ) == (2, 0.5, 0.2, 12.0)
    assert [r.rollout for r in parsed.rollouts] == [0, 1, 2]
    assert "ray" in parsed.provenance


def test_a_failure_file_written_inside_miles_reaches_the_summary(tmp_path: Path) -> None:
    lines = _run(tmp_path, FAIL="1")
    parsed = operator_summary.parse("\n".join(lines))
    assert parsed is not None and parsed.exit_code == 1
    assert parsed.failure is not None
    assert (parsed.failure.reason, parsed.failure.message) == ("RewardServiceFailed", "reward service down")


def test_a_failure_line_printed_by_an_actor_reaches_the_summary(tmp_path: Path) -> None:
    parsed = operator_summary.parse("\n".join(_run(tmp_path, FAIL_LINE="1")))
    assert parsed is not None and parsed.failure is not None
    assert (parsed.failure.reason, parsed.failure.message) == ("RewardServiceFailed", "from an actor")


def test_lines_that_are_not_miles_metrics_are_ignored_and_the_log_is_bounded() -> None:
    assert parse_metrics_line("rollout 3: not a dict") is None
    assert parse_metrics_line("[info] starting miles: 3 argv items") is None
    assert parse_metrics_line("eval 3: {'eval/aime': 0.1}") is None
    log = RolloutLog()
    for i in range(250):
        log.feed(f"rollout {i}: {{'rollout/raw_reward': 1}}")
    snap = log.snapshot()
    assert snap["rollouts_logged"] == 250 and snap["first_rollout"] == 0 and len(snap["rollouts"]) == 100
    assert snap["rollouts"][-1]["rollout"] == 249
    assert json.loads(json.dumps(snap)) == snap


def test_numpy_and_torch_values_in_a_miles_line_are_read_and_an_unreadable_one_costs_only_its_key() -> None:
    # What numpy 2 and torch print for the values miles's helpers compute (metric_utils.py:25-35 under
    # --log-passrate): before, one such value dropped every key of the line.
    line = (
        "\x1b[36m(RolloutManager pid=41)\x1b[0m [2026-12-01 08:00:03.000 rollout_manager] metrics.py:79 - perf 7: "
        "{'rollout/repetition_frac': np.float64(0.125), 'rollout/truncated_ratio': array([0.5]), "
        "'passrate/pass@8': np.float64(0.75), 'rollout/count': np.int64(3), 'perf/step_time': tensor(2.5), "
        "'rollout/raw_reward': <object at 0x7f>, 'rollout/kl': array([1., 2.])}"
    )
    log = RolloutLog()
    log.feed(line)
    log.feed(
        "[2026-12-01 08:00:03.500 actor_cell0_rank0] log_utils.py:66 - rollout 7: {'rollout/raw_reward': np.int64(1)}"
    )
    snap = log.snapshot()
    assert snap["rollouts"] == [
        {"rollout": 7, "raw_reward": 1.0, "repetition_frac": 0.125, "truncated_ratio": 0.5, "step_time_seconds": 2.5}
    ]
    assert snap["dropped_keys"] == ["rollout/raw_reward"]
    summary = operator_summary.parse(summary_line(0, log, {}, None))
    assert summary is not None and summary.last is not None and summary.last.repetition_frac == 0.125


def test_a_line_with_a_key_that_cannot_be_read_keeps_the_readable_keys() -> None:
    parsed = parse_metrics_line_keys("perf 2: {'rollout/repetition_frac': 0.25, <Key 1>: 3, 'perf/step_time': 1.5}")
    assert parsed == (2, {"repetition_frac": 0.25, "step_time_seconds": 1.5}, ["<unreadable key>"])


def test_a_failure_line_printed_by_the_driver_itself_reaches_the_summary() -> None:
    # Printed in the driver's own process, the line has no Ray actor prefix: the mark opens it.
    log = RolloutLog()
    log.feed('GRPO_FAILURE {"reason": "RewardServiceFailed", "message": "from the driver"}')
    parsed = operator_summary.parse(summary_line(1, log, {}, log.failure))
    assert parsed is not None and parsed.failure is not None
    assert (parsed.failure.reason, parsed.failure.message) == ("RewardServiceFailed", "from the driver")


def test_a_malformed_failure_is_no_failure_and_a_later_good_line_still_counts(tmp_path: Path) -> None:
    # A component that wrote the wrong shape must not cost the run its summary line: the launcher prints it after
    # reading the failure file, and a reason that is not one string is no Failed reason.
    log = RolloutLog()
    for bad in ('["RewardServiceFailed"]', '{"message": "no reason"}', '{"reason": 5}', "{not json"):
        log.feed(f"(RolloutManager pid=41) GRPO_FAILURE {bad}")
    assert log.failure is None
    log.feed('(RolloutManager pid=41) GRPO_FAILURE {"reason": "RewardServiceFailed", "message": "down"}')
    assert log.failure == {"reason": "RewardServiceFailed", "message": "down"}
    failure_file = tmp_path / "failure.json"
    failure_file.write_text('{"message": "no reason"}')
    assert read_failure(failure_file) is None
