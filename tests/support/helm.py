"""Helm, run for real: the chart rendered, linted and installed with the pinned helm binary.

`helm(*args)` runs `helm` (built and cached by `grpo_dev.localcluster`, never a system copy) with
repository config and caches in a scratch directory, so tests neither read nor write the user's helm state.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml
from grpo_dev.localcluster import tool_path

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "grpo-operator"
_HOME = Path(tempfile.gettempdir()) / "grpo-chart-tests-helm"


def helm(*args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(_HOME / "cache"),
        "HELM_CONFIG_HOME": str(_HOME / "config"),
        "HELM_DATA_HOME": str(_HOME / "data"),
    }
    result = subprocess.run(
        [str(tool_path("helm")), *args], capture_output=True, text=True, env=env, input=input, timeout=300, check=False
    )
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({result.returncode}):\n{result.stderr}{result.stdout}")
    return result


def template(*sets: str, release: str = "grpo", namespace: str = "grpo-system") -> str:
    """`helm template` of the chart with `--set` values (`--set-json` for those starting with `json:`), as text."""
    args = [
        arg for value in sets for arg in (("--set-json", value[5:]) if value.startswith("json:") else ("--set", value))
    ]
    return helm("template", release, str(CHART), "--namespace", namespace, *args).stdout


def documents(rendered: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def by_kind(rendered: str, kind: str) -> list[dict[str, Any]]:
    return [doc for doc in documents(rendered) if doc["kind"] == kind]
