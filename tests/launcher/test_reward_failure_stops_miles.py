"""A reward failure ends the run on every miles version: the launcher stops a miles that goes on after one.

The real launcher runs the miles double scoring through the real reward client against a reward service that is
down (a closed port) with a 1 s retry budget. At dec268f7 the client's `RewardServiceFailed` ends miles; at v0.1.0
miles swallows it and fetches more prompts (`inference_rollout_train.py:121-126` at v0.1.0, the double's
`--fake-miles-version v0.1.0`), so the run ends only because the launcher reads the failure the client recorded.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest

from tests.support.launcher import base_config, launcher, write_config

FAKE = Path(__file__).resolve().parents[2] / "devtools" / "grpo_dev" / "fake_miles.py"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _summary(stdout: str) -> dict[str, object]:
    line = next(line for line in reversed(stdout.splitlines()) if line.startswith("GRPO_RUN_SUMMARY "))
    return dict(json.loads(line.split(" ", 1)[1]))


@pytest.mark.parametrize(
    ("version", "swallowed"),
    [pytest.param("dec268f7", False, id="dec268f7-miles-raises"), pytest.param("v0.1.0", True, id="v0.1.0-swallows")],
)
def test_a_reward_service_down_ends_the_run_as_reward_service_failed(
    tmp_path: Path, version: str, swallowed: bool
) -> None:
    miles = [sys.executable, str(FAKE), "--num-rollout", "1000", "--fake-step-seconds", "0"]
    miles += ["--custom-rm-path", "grpo_launcher.reward_client.reward", "--fake-score-rewards"]
    miles += ["--rm-url", f"http://127.0.0.1:{_closed_port()}/score", "--fake-miles-version", version]
    config = write_config(tmp_path, base_config(tmp_path))
    # The subprocess timeout is the stall: a v0.1.0 miles left alone never ends (the double retries forever).
    proc = launcher(
        "run", "--metrics-addr", "127.0.0.1", "--config", str(config), "--", *miles,
        env={"GRPO_REWARD_RETRY_BUDGET_S": "1"},
        timeout=90,
    )  # fmt: skip
    failure = _summary(proc.stdout)["failure"]
    assert isinstance(failure, dict), proc.stdout[-2000:]
    assert (proc.returncode, failure["reason"]) == (1, "RewardServiceFailed"), proc.stdout[-2000:]
    assert ("Task raised exception: RewardServiceFailed" in proc.stdout) is swallowed
