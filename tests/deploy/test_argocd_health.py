"""The Argo CD health check for GRPORuns, run under Lua 5.1 against a sample of every phase.

The samples and expected health live in deploy/argocd/health_test.yaml + testdata/ (Argo CD's own format for
resource_customizations, so the check can be upstreamed as is). tests/integration/operator/test_chart_rbac.py also runs
the check on the objects a real run goes through.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from tests.support.argocd import ARGOCD, HEALTH_LUA, health

CASES: list[dict[str, Any]] = yaml.safe_load((ARGOCD / "health_test.yaml").read_text())["tests"]


@pytest.mark.parametrize(
    "case", CASES, ids=[c["inputPath"].removeprefix("testdata/").removesuffix(".yaml") for c in CASES]
)
def test_each_sample_grporun_gets_the_expected_health(case: dict[str, Any]) -> None:
    obj = yaml.safe_load((ARGOCD / case["inputPath"]).read_text())
    assert health(obj) == case["healthStatus"]


def test_the_samples_cover_every_phase_and_every_health_status() -> None:
    phases = set()
    for case in CASES:
        obj = yaml.safe_load((ARGOCD / case["inputPath"]).read_text())
        phases.add((obj.get("status") or {}).get("phase"))
    assert phases == {None, "Pending", "Provisioning", "Running", "Succeeded", "Failed", "Suspended"}
    assert {c["healthStatus"]["status"] for c in CASES} == {"Progressing", "Healthy", "Degraded", "Suspended"}


def _sample(name: str) -> dict[str, Any]:
    return copy.deepcopy(yaml.safe_load((ARGOCD / "testdata" / f"{name}.yaml").read_text()))


def test_a_healthy_condition_turning_false_degrades_a_running_run() -> None:
    run = _sample("running")
    assert health(run)["status"] == "Progressing"
    healthy = next(c for c in run["status"]["conditions"] if c["type"] == "Healthy")
    healthy.update(status="False", reason="Stalled", message="no rollout progress for 1900 s")
    assert health(run) == {"status": "Degraded", "message": "Stalled: no rollout progress for 1900 s"}


def test_a_spec_change_not_yet_observed_is_progressing_until_the_operator_catches_up() -> None:
    run = _sample("suspended")
    run["metadata"]["generation"] = 3  # spec.suspend flipped back to false, not yet observed
    assert health(run)["status"] == "Progressing"
    run["status"]["observedGeneration"] = 3
    assert health(run)["status"] == "Suspended"


def test_a_finished_run_keeps_its_health_whatever_its_spec_says() -> None:
    for name, status in (("succeeded", "Healthy"), ("failed-degenerate", "Degraded")):
        run = _sample(name)
        run["metadata"]["generation"] = 9
        assert health(run)["status"] == status


def test_the_argocd_cm_snippet_carries_the_same_lua() -> None:
    cm = yaml.safe_load((ARGOCD / "argocd-cm.yaml").read_text())
    assert cm["metadata"]["name"] == "argocd-cm"
    assert cm["data"] == {"resource.customizations.health.grpo.dev_GRPORun": HEALTH_LUA.read_text()}


def _wave(app: dict[str, Any]) -> int:
    return int(app["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"])


def test_the_applications_deliver_the_crds_with_server_side_apply_and_the_runs_after_the_operator() -> None:
    apps = {a["metadata"]["name"]: a for a in yaml.safe_load_all((ARGOCD / "applications.yaml").read_text())}
    operator, runs = apps["grpo-operator"], apps["grpo-runs"]
    assert operator["spec"]["source"]["path"] == "charts/grpo-operator"
    assert "ServerSideApply=true" in operator["spec"]["syncPolicy"]["syncOptions"]
    assert _wave(operator) < _wave(runs)
    options = runs["spec"]["syncPolicy"]["syncOptions"]
    assert "SkipDryRunOnMissingResource=true" in options and not any(o.startswith("Replace=") for o in options)
    assert (ARGOCD.parents[1] / runs["spec"]["source"]["path"]).is_dir()
    # a GRPORun is Progressing for hours: it must sit in the last wave of its Application
    docs = [d for p in sorted((ARGOCD / "runs").glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d]
    run_waves = [
        int(d["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"]) for d in docs if d["kind"] == "GRPORun"
    ]
    other_waves = [
        int(d["metadata"].get("annotations", {}).get("argocd.argoproj.io/sync-wave", 0))
        for d in docs
        if d["kind"] != "GRPORun"
    ]
    assert run_waves and min(run_waves) > max(other_waves, default=0)


def test_the_chart_readme_shows_the_same_argocd_cm_snippet() -> None:
    readme = (ARGOCD.parents[1] / "charts" / "grpo-operator" / "README.md").read_text()
    blocks = readme.split("```yaml\n")[1:]
    assert [b.split("```")[0] for b in blocks] == [(ARGOCD / "argocd-cm.yaml").read_text()]
