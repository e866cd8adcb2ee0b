"""The reconciler keeps a job's log redacted of the run's secretEnv values as read from their Secrets at keeping
time, through the Kubernetes edge; a Secret it cannot read (no RBAC, gone, no such key, the API server away) is
said in the operator's log and the log is still kept, redacted of what is known. An ended job's message (Ray puts
the log's last lines in it, and the status quotes it) is redacted the same way."""

from __future__ import annotations

import base64
import logging
from typing import Any

import pytest
import urllib3
from grpo_operator.controller.config import load_settings
from grpo_operator.controller.reconciler import Reconciler, _Context
from grpo_operator.edges.kube import Kube
from grpo_operator.render.redaction import REDACTED
from grpo_operator.status.observation import JobObservation, JobState, Seen
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.support.builders import example, rendered, run_of

WANDB, OTHER, TOKEN = "wandb-canary-0f1e2d3c4b5a", "other-canary-99887766", "ray-token-canary-0123456789"


def _secret(data: dict[str, str]) -> client.V1Secret:
    return client.V1Secret(data={k: base64.b64encode(v.encode()).decode() for k, v in data.items()})


class FakeCore:
    """CoreV1Api's read_namespaced_secret: a Secret, or the refusal the API server gives, by name."""

    def __init__(self, answers: dict[str, client.V1Secret | Exception]) -> None:
        self.answers, self.reads = answers, []  # type: ignore[var-annotated]

    def read_namespaced_secret(self, name: str, namespace: str) -> client.V1Secret:
        self.reads.append((namespace, name))
        answer = self.answers.get(name, ApiException(status=404, reason="Not Found"))
        if isinstance(answer, Exception):
            raise answer
        return answer


def _kube(answers: dict[str, client.V1Secret | Exception]) -> Kube:
    kube = Kube(client.ApiClient())
    kube.core = FakeCore(answers)  # type: ignore[assignment]
    return kube


def test_the_edge_reads_each_secret_once_and_says_why_each_value_it_could_not_read_is_missing() -> None:
    kube = _kube(
        {
            "wandb": _secret({"api-key": WANDB, "other": OTHER}),
            "locked": ApiException(status=403, reason="Forbidden"),
            "away": urllib3.exceptions.MaxRetryError(None, "/", "refused"),  # type: ignore[arg-type]
        }
    )
    refs = [("wandb", "api-key"), ("wandb", "other"), ("wandb", "nope"), ("locked", "k"), ("gone", "k"), ("away", "k")]
    values, missed = kube.secret_values("team-a", refs)
    assert values == [WANDB, OTHER]
    assert missed == [
        "Secret team-a/wandb key nope (the Secret has no such key)",
        "Secret team-a/locked key k (403 Forbidden)",
        "Secret team-a/gone key k (404 Not Found)",
        "Secret team-a/away key k (MaxRetryError)",
    ]
    assert kube.core.reads == [("team-a", n) for n in ("wandb", "locked", "gone", "away")]  # type: ignore[attr-defined]


class FakeRay:
    token = TOKEN

    def __init__(self, log: str, job: JobObservation | None = None) -> None:
        self.log, self.job = log, job

    def logs(self, submission_id: str) -> str:
        return self.log

    def find(self, submission_id: str) -> JobObservation | None:
        return self.job


SECRET_ENV = [
    {"name": "WANDB_API_KEY", "secretKeyRef": {"name": "wandb", "key": "api-key"}},
    {"name": "OTHER_KEY", "secretKeyRef": {"name": "locked", "key": "k"}},
]
LOG = f"wandb: key {WANDB}\nother {OTHER}\nauth {TOKEN}\nrollout 3: reward 0.5\n"


def _reconciler_and_context(ray: FakeRay) -> tuple[Reconciler, _Context]:
    doc = example("quickstart", {"secretEnv": SECRET_ENV})
    kube = _kube({"wandb": _secret({"api-key": WANDB}), "locked": ApiException(status=403, reason="Forbidden")})
    reconciler = Reconciler(kube=kube, settings=load_settings({}))
    return reconciler, _Context(run_of(doc), rendered(doc), ray)  # type: ignore[arg-type]


def test_the_kept_log_is_redacted_of_what_could_be_read_and_the_operator_log_says_what_could_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reconciler, ctx = _reconciler_and_context(FakeRay(LOG))
    obs = Seen()
    with caplog.at_level(logging.WARNING):
        obs = reconciler._read_log(ctx, obs, "grpo-quickstart-1")
    kept: dict[str, Any] = ctx.log_manifests["grpo-quickstart-1"]
    assert WANDB not in kept["data"]["job.log"] and TOKEN not in kept["data"]["job.log"]
    assert kept["data"]["job.log"] == f"wandb: key {REDACTED}\nother {OTHER}\nauth {REDACTED}\nrollout 3: reward 0.5\n"
    assert obs.log_text == kept["data"]["job.log"] and obs.logs is not None  # the status reads the redacted text
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "Secret default/locked key k (403 Forbidden) cannot be read" in warning and OTHER not in warning


def test_an_ended_jobs_message_is_redacted_before_the_status_can_quote_it() -> None:
    failed = JobObservation("grpo-quickstart-1", JobState.FAILED, f"last logs: wandb: key {WANDB}")
    reconciler, ctx = _reconciler_and_context(FakeRay(LOG, failed))
    found = reconciler._find(ctx, "grpo-quickstart-1")
    assert found is not None and found.message == f"last logs: wandb: key {REDACTED}"
    running = JobObservation("grpo-quickstart-1", JobState.RUNNING, "Job is currently running.")
    reconciler, ctx = _reconciler_and_context(FakeRay(LOG, running))
    assert reconciler._find(ctx, "grpo-quickstart-1") == running
    assert ctx.secret_values is None  # a running job's message holds no log: no Secret is read for it
