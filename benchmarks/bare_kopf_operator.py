"""The baseline of `make bench-operator`: a bare kopf operator on the same GRPORun CRD, with the operator's own
kopf settings (annotation storage, no cluster scan, the same watch timeout) and handlers that do the least an
operator can: on create, one child (a ConfigMap owned by the run, so "apply -> child created" means the same
thing), and a no-op timer at the operator's interval. What it costs is what kopf itself costs at that N.

    kopf run --standalone --namespace NS benchmarks/bare_kopf_operator.py
"""

from __future__ import annotations

import logging
import os
from typing import Any

import kopf
from kubernetes import client, config

INTERVAL = float(os.environ.get("GRPO_RECONCILE_INTERVAL_SECONDS", "15"))
_core: client.CoreV1Api | None = None


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    global _core  # noqa: PLW0603 - one client per process
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="grpo.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="grpo.dev")
    settings.posting.level = logging.WARNING
    settings.scanning.disabled = True
    settings.watching.server_timeout = 300
    config.load_kube_config()  # type: ignore[no-untyped-call]
    _core = client.CoreV1Api()


@kopf.on.create("grpo.dev", "v1alpha1", "grporuns")
def on_create(name: str, namespace: str, uid: str, **_: Any) -> None:
    assert _core is not None
    body: Any = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{name}-bare",
            "namespace": namespace,
            "labels": {"bench.grpo.dev/run": name},
            "ownerReferences": [
                {"apiVersion": "grpo.dev/v1alpha1", "kind": "GRPORun", "name": name, "uid": uid, "controller": True}
            ],
        },
    }
    _core.create_namespaced_config_map(namespace, body)


@kopf.timer("grpo.dev", "v1alpha1", "grporuns", interval=INTERVAL, sharp=False)
def on_timer(**_: Any) -> None:
    return None
