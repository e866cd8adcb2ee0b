"""What the trainer image itself must hold for miles and KubeRay, checked at build time and by the preflight.

- prometheus_client must accept metric names with a `.`: miles's collector turns every metric key into a gauge name
  by replacing only `/`, `-` and `@`, in a loop with no try, so a key like `rollout/zero_std/count_0.0` (float
  rewards) raises and aborts the rest of that update, `rollout/repetition_frac` and `rollout/truncated_ratio`
  included. prometheus_client 0.21.1 rejects such names (`Invalid metric name`); 0.22.0 accepts them (UTF-8 metric
  names). The check builds that very gauge in a private registry rather than comparing version strings.
- `wget` must be on PATH: KubeRay's probes run it in the Ray containers (`wget ... /api/local_raylet_healthz`).

docs/integrations/miles.md and kuberay.md: where miles and KubeRay do this.

`python3 -m grpo_launcher.image_checks` (the Dockerfile's build-time assertion) prints each result and exits 1 on
a failure.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import sys
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Gauge

from grpo_launcher.checks import CheckResult, failed, passed

MIN_PROMETHEUS_CLIENT = "0.22.0"
DOTTED_KEY = "rollout/zero_std/count_0.0"


def miles_gauge_name(key: str) -> str:
    """The gauge name miles's collector derives from a metric key."""
    return "miles_" + key.replace("/", "_").replace("-", "_").replace("@", "_at_")


def check_prometheus_client() -> CheckResult:
    version = importlib.metadata.version("prometheus_client")
    name = miles_gauge_name(DOTTED_KEY)
    try:
        Gauge(name, DOTTED_KEY, ["run_name"], registry=CollectorRegistry()).labels("probe").set(1.0)
    except ValueError as exc:
        return failed(
            "prometheus_client",
            f"prometheus_client {version} rejects the gauge miles makes for "
            f"{DOTTED_KEY!r} ({exc}): later metrics of that update are lost; install "
            f"prometheus_client>={MIN_PROMETHEUS_CLIENT}",
            version=version,
        )
    return passed(
        "prometheus_client", f"prometheus_client {version} accepts miles's dotted gauge names", version=version
    )


def check_wget(which: Callable[[str], str | None] = shutil.which) -> CheckResult:
    path = which("wget")
    if path is None:
        return failed("wget", "wget is not on PATH: KubeRay's readiness and liveness probes run it in Ray containers")
    return passed("wget", f"{path} (KubeRay's probes)", path=path)


def image_checks() -> tuple[CheckResult, ...]:
    return check_prometheus_client(), check_wget()


def main() -> int:
    results = image_checks()
    for result in results:
        print(result.line())
    return 1 if any(r.status.value == "fail" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
