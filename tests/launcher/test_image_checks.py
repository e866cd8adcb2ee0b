"""The trainer image holds what miles and KubeRay need of it: a prometheus_client whose collector survives
miles's dotted gauge names, and wget for KubeRay's probes; the Dockerfile asserts both and the preflight
repeats them on every pod."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import prometheus_client
import pytest
from grpo_launcher import image_checks
from grpo_launcher.checks import Status
from grpo_launcher.config import parse_run_config
from grpo_launcher.host_checks import HostPaths
from grpo_launcher.image_checks import DOTTED_KEY, check_prometheus_client, check_wget, miles_gauge_name
from grpo_launcher.preflight import PreflightEnv, run_preflight

from tests.support.launcher import base_config

DOCKERFILE = (Path(__file__).resolve().parents[2] / "trainer_image" / "Dockerfile").read_text()

# prometheus_client 0.21.1 metrics_core.py: METRIC_NAME_RE; its Gauge raised ValueError("Invalid metric name")
# for anything else. 0.22.0 accepts any UTF-8 name.
_OLD_NAME_RE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


class _Gauge021(prometheus_client.Gauge):
    """prometheus_client 0.21.1's name rule in front of the installed Gauge."""

    def __init__(self, name: str, *args: object, **kwargs: object) -> None:
        if not _OLD_NAME_RE.match(name):
            raise ValueError("Invalid metric name: " + name)
        super().__init__(name, *args, **kwargs)  # type: ignore[arg-type]


def test_the_gauge_name_miles_makes_for_a_float_reward_key_keeps_its_dot() -> None:
    assert miles_gauge_name(DOTTED_KEY) == "miles_metric_rollout_zero_std_count_0.0"


def test_the_installed_prometheus_client_survives_miles_dotted_gauge_names() -> None:
    result = check_prometheus_client()
    assert result.status is Status.PASS, result.reason


def test_a_prometheus_client_that_rejects_dotted_names_fails_the_check_naming_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(image_checks, "Gauge", _Gauge021)
    result = check_prometheus_client()
    assert result.status is Status.FAIL
    assert "rollout/zero_std/count_0.0" in result.reason and "prometheus_client>=0.22.0" in result.reason


def test_a_missing_wget_fails_the_check() -> None:
    assert check_wget(lambda _: None).status is Status.FAIL
    assert check_wget(lambda _: "/usr/bin/wget").status is Status.PASS


def test_the_dockerfile_asserts_both_at_build_time() -> None:
    assert "python3 -m grpo_launcher.image_checks" in DOCKERFILE
    assert "apt-get install -y --no-install-recommends wget" in DOCKERFILE


def test_the_preflight_fails_on_an_image_check_with_the_operator_line(tmp_path: Path, host: HostPaths) -> None:
    spec = parse_run_config(json.dumps(base_config(tmp_path, gpus=0))).preflight
    env = PreflightEnv(paths=host, image_checks=lambda: (check_prometheus_client(), check_wget(lambda _: None)))
    report = run_preflight(spec, env, io.StringIO())
    assert [r.name for r in report.failures] == ["wget"]
    assert report.failure_line().startswith("preflight failed: wget: wget is not on PATH")
