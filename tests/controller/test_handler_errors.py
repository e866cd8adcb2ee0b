"""The error contract's last rule (edges/errors.py): an error a reconcile did not expect reaches kopf as a
`TemporaryError` (retried after the reconcile interval, logged by kopf as its one line) and the operator logs one
line naming the run and the error, never a traceback."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import kopf
import pytest
from grpo_operator.controller import handlers
from grpo_operator.controller.config import OperatorSettings
from grpo_operator.edges.kubecache import KubeCache
from grpo_operator.edges.opmetrics import OperatorMetrics


class Broken:
    def reconcile(self, body: Any) -> None:
        raise ValueError("the API server sent a status without a phase")


def test_an_unexpected_error_is_a_temporary_error_and_one_log_line(caplog: pytest.LogCaptureFixture) -> None:
    settings = OperatorSettings(ray_address="http://127.0.0.1:9", reconcile_interval_seconds=15)
    metrics = OperatorMetrics()
    kube = SimpleNamespace(cache=KubeCache())
    pacing = SimpleNamespace(reconciled=lambda *_: None)
    operator = handlers.Operator(settings, metrics, kube, Broken(), pacing)  # type: ignore[arg-type]
    body = {"metadata": {"namespace": "team", "name": "x"}}
    kwargs = {"grpo_runs": {}, "ray_clusters": {}, "run_pods": {}, "reward_deployments": {}}
    with caplog.at_level(logging.WARNING, logger="grpo_operator"), pytest.raises(kopf.TemporaryError) as raised:
        handlers._reconcile(operator, body, kwargs)  # type: ignore[arg-type]
    assert raised.value.delay == 15
    assert (
        str(raised.value) == "team/x: reconcile not finished: ValueError: the API server sent a status without a phase"
    )
    [line] = [r for r in caplog.records if r.name == "grpo_operator"]
    assert line.exc_info is None and "team/x: reconcile not finished: ValueError" in line.getMessage()
