"""Helm, run for real: the chart rendered, linted and installed with the pinned helm binary.

`helm(*args)` is `grpo_dev.localcluster.realplatform.helm`: the pinned helm binary, with repository config and
caches in a scratch directory, so tests neither read nor write the user's helm state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from grpo_dev.localcluster.realplatform import helm

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "grpo-operator"


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
