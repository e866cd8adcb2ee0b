"""Golden files of `helm template` for the chart's value cases. Regenerate after a deliberate chart change:

    .venv/bin/python -m tests.integration.chart.golden

and review the diff under tests/integration/chart/golden/ before committing it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.support.helm import template

GOLDEN = Path(__file__).resolve().parent / "golden"

# case name -> --set values
CASES: dict[str, tuple[str, ...]] = {
    "default": (),
    "namespaced-monitored": (
        "watchNamespaces={team-a,team-b}",
        "image.digest=sha256:" + "a" * 64,
        "rewardService.image=registry.example/grpo-reward@sha256:" + "b" * 64,
        "metrics.serviceMonitor.enabled=true",
        "metrics.serviceMonitor.labels.release=prometheus",
        "metrics.prometheusRule.enabled=true",
        "metrics.grafanaDashboard.enabled=true",
        "logLevel=verbose",
    ),
}


def rendered(case: str) -> str:
    return template(*CASES[case])


def main() -> int:
    GOLDEN.mkdir(exist_ok=True)
    for case in CASES:
        path = GOLDEN / f"{case}.yaml"
        path.write_text(rendered(case))
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
