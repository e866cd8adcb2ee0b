"""A finished job's log kept in a ConfigMap: a log over the ConfigMap's 1 MiB limit keeps its last lines,
whole, and the status says it was cut."""

from __future__ import annotations

from grpo_operator.render.joblogs import job_logs_config_map


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
