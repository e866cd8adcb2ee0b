"""A finished job's log kept in a ConfigMap: a log over the ConfigMap's 1 MiB limit keeps its last lines,
whole, and the status says it was cut."""

from __future__ import annotations

import pytest
from grpo_operator.render.joblogs import TAIL_BYTES, job_logs_config_map, tail


def test_a_two_mib_log_keeps_its_last_whole_lines_within_a_configmaps_limit() -> None:
    lines = [f"rollout {i}: reward 0.{i % 10}" for i in range(100_000)]
    text = "\n".join(lines) + "\n"
    assert len(text) > 2 * 1024 * 1024
    manifest, ref = job_logs_config_map("ns", "r", "uid-1", "grpo-r-1", text)
    kept = manifest["data"]["job.log"]
    assert ref.truncated and ref.bytes == len(kept.encode())
    assert 512 * 1024 < ref.bytes < 1024 * 1024  # most of the limit used, room left for the rest of the object
    assert kept.endswith(lines[-1] + "\n")
    assert kept.split("\n", 1)[0] in lines  # starts at a line, not inside one


def test_a_short_log_is_kept_whole_and_not_marked_cut() -> None:
    text = "rollout 1: reward 0.5\nrollout 2: reward 0.6\n"
    manifest, ref = job_logs_config_map("ns", "r", "uid-1", "grpo-r-1", text)
    assert manifest["data"]["job.log"] == text
    assert (ref.truncated, ref.bytes, ref.submission_id) == (False, len(text), "grpo-r-1")


def test_a_log_of_exactly_the_bound_is_kept_whole() -> None:
    text = "x" * (TAIL_BYTES - 1) + "\n"
    manifest, ref = job_logs_config_map("ns", "r", "uid-1", "grpo-r-1", text)
    assert manifest["data"]["job.log"] == text and not ref.truncated


@pytest.mark.parametrize(
    ("text", "limit", "kept"),
    [
        # The cut lands inside a line: the kept text starts at the next whole line.
        ("first line\nsecond\nthird\n", 12, "third\n"),
        # The cut lands on a newline: the kept text starts at the line after it, with no blank line first.
        ("first\nsecond\nthird\n", 14, "second\nthird\n"),
        # The cut lands at a line's start: that line is whole and kept.
        ("first\nsecond\nthird\n", 13, "second\nthird\n"),
        # A log without a final newline whose last line is one character.
        ("first\nsecond\nX", 4, "X"),
        # The last line alone is longer than the bound: its end is kept rather than nothing.
        ("short\n" + "y" * 40 + "\n", 10, "y" * 9 + "\n"),
    ],
)
def test_a_cut_log_keeps_whole_lines_from_the_first_line_start_after_the_cut(text: str, limit: int, kept: str) -> None:
    assert tail(text, limit) == (kept, True)


def test_the_kept_log_is_owned_by_the_run_only_when_the_run_has_a_uid() -> None:
    owned, _ = job_logs_config_map("ns", "r", "uid-1", "grpo-r-1", "log\n")
    (owner,) = owned["metadata"]["ownerReferences"]
    assert (owner["name"], owner["uid"]) == ("r", "uid-1")
    offline, _ = job_logs_config_map("ns", "r", None, "grpo-r-1", "log\n")
    assert "ownerReferences" not in offline["metadata"]
