"""The launcher's run config under hostile or corrupted input: strict types, one line, no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from grpo_launcher.config import ConfigError, parse_run_config
from grpo_launcher.launch import StaleConfigError, check_argv_matches

from tests.support.launcher import base_config, launcher, write_config


def launcher_preflight(config_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "grpo_launcher", "preflight", "--config", str(config_path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("value", ["8", True, 8.0, "true"])
def test_a_gpu_count_that_is_not_an_integer_is_refused(tmp_path: Path, value: Any) -> None:
    with pytest.raises(ConfigError, match=r"preflight\.gpus: .*valid integer"):
        parse_run_config(json.dumps(base_config(tmp_path, gpus=value)))


@pytest.mark.parametrize(
    ("field", "value"), [("gdrcopy", 1), ("gdrcopy", "false"), ("shmMinGiB", "1"), ("metricsPort", "9465")]
)
def test_other_preflight_values_are_taken_only_in_their_own_type(tmp_path: Path, field: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=rf"preflight\.{field}: "):
        parse_run_config(json.dumps(base_config(tmp_path, **{field: value})))


def _one_line_exit_2(proc: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-2000:]
    assert proc.returncode == 2, proc.stderr[-500:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) < 400, lines[:3]
    return lines[0]


def test_a_config_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "run-config.json"
    path.write_bytes(b'{"apiVersion": "grpo.dev/v1alpha1", "kind": "\xff\xfe"}')
    assert "not UTF-8" in _one_line_exit_2(launcher_preflight(path))


@pytest.mark.parametrize("depth", [5_000, 200_000])
def test_a_deeply_nested_config_is_one_line(tmp_path: Path, depth: int) -> None:
    config = json.dumps(base_config(tmp_path)).replace(
        '"somethingNew": {"x": 1}', '"deep": ' + "[" * depth + "]" * depth
    )
    path = tmp_path / "run-config.json"
    path.write_text(config)
    line = _one_line_exit_2(launcher_preflight(path))
    assert "nested too deeply" in line or "larger than a ConfigMap" in line


def test_a_huge_value_is_quoted_back_cut_short(tmp_path: Path) -> None:
    config = base_config(tmp_path, gpus="9" * 900_000)
    path = tmp_path / "run-config.json"
    path.write_text(json.dumps(config))
    proc = launcher_preflight(path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr) < 1000 and "preflight.gpus" in proc.stderr


def test_a_stale_argv_message_quotes_items_cut_short(tmp_path: Path) -> None:
    config = parse_run_config(json.dumps({**base_config(tmp_path), "argv": ["python3", "x" * 500_000]}))
    with pytest.raises(StaleConfigError) as raised:
        check_argv_matches(config, ["python3", "y" * 500_000])
    assert len(str(raised.value)) < 600


def test_preflight_creates_no_checkpoint_directory(tmp_path: Path) -> None:
    path = tmp_path / "run-config.json"
    path.write_text(json.dumps(base_config(tmp_path, checkpointDir=str(tmp_path / "not" / "yet"))))
    launcher_preflight(path)
    assert not (tmp_path / "not").exists()


@pytest.mark.parametrize(
    ("env", "where"),
    [
        pytest.param({"A=B": "1"}, "env.A=B", id="equals-in-a-name"),
        pytest.param({"A\x00B": "1"}, "env.A\\u0000B", id="nul-in-a-name"),
        pytest.param({"": "1"}, "env.", id="empty-name"),
        pytest.param({"A": "x\x00y"}, "env.A", id="nul-in-a-value"),
    ],
)
def test_run_config_env_a_process_cannot_hold_is_one_message_and_exit_2_before_miles_starts(
    tmp_path: Path, env: dict[str, str], where: str
) -> None:
    """An env name with '=' or NUL, or a value with NUL, cannot reach execve: the launcher says which entry and
    why, as it does for any bad config, instead of a traceback when it starts miles."""
    started = tmp_path / "started"
    script = tmp_path / "train.py"
    script.write_text(f"open({str(started)!r}, 'w').write('1')\n")
    argv = [sys.executable, str(script)]
    path = write_config(tmp_path, {**base_config(tmp_path), "argv": argv, "env": env})
    proc = launcher("run", "--metrics-addr", "127.0.0.1", "--config", str(path), "--", *argv)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-2000:]
    assert proc.returncode == 2, proc.stdout[-1000:] + proc.stderr[-1000:]
    header, line = proc.stderr.strip().splitlines()
    assert header.startswith("run config ") and "is invalid" in header
    assert line.strip().startswith(where) and "environment variable" in line and "fix: " in line
    assert not started.exists()
