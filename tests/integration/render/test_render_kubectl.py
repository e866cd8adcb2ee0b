"""`grpo render` output is what kubectl accepts, exactly as a user would pipe it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.builders import EXAMPLES

pytestmark = pytest.mark.integration


def test_grpo_render_of_the_quickstart_passes_kubectl_client_dry_run(kubectl) -> None:  # type: ignore[no-untyped-def]
    rendered = subprocess.run(
        [sys.executable, "-m", "grpo_operator.cli", "render", "-f", str(EXAMPLES / "quickstart.yaml")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result = kubectl("apply", "--dry-run=client", "-f", "-", input=rendered)
    assert sorted(line.split(" ")[0] for line in result.stdout.strip().splitlines()) == [
        "configmap/quickstart-config",
        "networkpolicy.networking.k8s.io/quickstart-ray-head",
        "networkpolicy.networking.k8s.io/quickstart-ray-worker",
        "poddisruptionbudget.policy/quickstart-ray-head",
        "raycluster.ray.io/quickstart-ray",
    ]


def test_grpo_render_refuses_an_invalid_run_with_its_validation_lines() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "grpo_operator.cli", "render", "-f", str(EXAMPLES / "qwen25-72b-disaggregated.yaml")],
        check=False,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1 and "GiB per GPU" in result.stdout and "apiVersion" not in result.stdout
