"""The Argo CD health samples are real GRPORuns: the real API server accepts each one's spec and status under
the generated CRD, and keeps every status field (it prunes undeclared ones silently)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.argocd import ARGOCD, health

pytestmark = pytest.mark.integration
SAMPLES = sorted((ARGOCD / "testdata").glob("*.yaml"))


def test_every_sample_is_accepted_and_read_back_unchanged(namespace: str, kubectl: Any) -> None:
    for path in SAMPLES:
        sample: dict[str, Any] = yaml.safe_load(path.read_text())
        name = path.stem
        obj = {
            "apiVersion": sample["apiVersion"],
            "kind": sample["kind"],
            "spec": sample["spec"],
            "metadata": {"name": name, "namespace": namespace},
        }
        kubectl("create", "-f", "-", input=json.dumps(obj))
        if "status" in sample:
            kubectl(
                "patch",
                "grporun",
                name,
                "-n",
                namespace,
                "--subresource=status",
                "--type=merge",
                "-p",
                json.dumps({"status": sample["status"]}),
            )
        stored = json.loads(kubectl("get", "grporun", name, "-n", namespace, "-o", "json").stdout)
        assert stored.get("status") == sample.get("status"), Path(path).name
        # the stored object (server defaults, real metadata) gets the health its sample promises, generation aside
        stored["metadata"]["generation"] = sample["metadata"]["generation"]
        assert health(stored) == health(sample), path.name
