"""A reconcile makes the run's plan once: validation judges the same plan the children are rendered from.

The reconciler runs in-process against the real API server; the counter wraps the actor memory estimate,
which every plan computes exactly once (`grpo_operator.planning.plan.plan_run`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from grpo_operator.controller.config import load_settings
from grpo_operator.controller.reconciler import Reconciler
from grpo_operator.edges.kube import Kube
from grpo_operator.planning import plan as plan_module
from kubernetes import config

from tests.support.operator_harness import manifest

pytestmark = pytest.mark.integration


def test_one_reconcile_of_a_new_run_plans_it_once(
    control_plane: Any, namespace: str, kubectl: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[object] = []
    real = plan_module.actor_estimate

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(plan_module, "actor_estimate", counted)
    kubectl("apply", "-n", namespace, "-f", "-", input=manifest("plan-once", namespace))
    body = json.loads(kubectl("get", "grporun", "plan-once", "-n", namespace, "-o", "json").stdout)
    api = config.new_client_from_config(config_file=str(control_plane.kubeconfig))  # type: ignore[no-untyped-call]
    reconciler = Reconciler(kube=Kube(api), settings=load_settings({"GRPO_RAY_ADDRESS": "http://127.0.0.1:9"}))
    outcome = reconciler.reconcile(body)
    assert outcome.status.plan is not None and outcome.status.plan.fits
    assert kubectl("get", "raycluster", "-n", namespace, "-o", "name").stdout.strip(), "the children were rendered"
    assert len(calls) == 1, f"the plan was computed {len(calls)} times in one reconcile"
    api.close()
