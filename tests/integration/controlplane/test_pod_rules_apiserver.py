"""Values that reach a pod template obey the API server's own pod rules: for each hostile value, the
verdict of a real kube-apiserver on a Pod carrying it, the GRPORun CRD's verdict and `grpo validate`'s
verdict are the same. A value a Pod would refuse must never get past the GRPORun checks, or the run waits
for pods KubeRay can never create.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from typing import Any

import pytest
from grpo_operator.cli.loading import parse_run
from grpo_operator.planning.validation import errors, validate

from tests.support.builders import base, merge

pytestmark = pytest.mark.integration

Kubectl = Callable[..., subprocess.CompletedProcess[str]]

TOLERATIONS: dict[str, dict[str, Any]] = {
    "Exists with a value": {"key": "gpu", "operator": "Exists", "value": "yes"},
    "Exists without a value": {"key": "gpu", "operator": "Exists"},
    "Exists without a key": {"operator": "Exists"},
    "Equal without a key": {"value": "x"},
    "Equal with a value": {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
    "a value that is no label value": {"key": "gpu", "value": "has space"},
    "a key that is no label name": {"key": "-gpu", "operator": "Exists"},
    "a key with a prefix": {"key": "example.com/gpu", "operator": "Exists"},
    "seconds without NoExecute": {"key": "gpu", "operator": "Exists", "tolerationSeconds": 30},
    "seconds with NoExecute": {"key": "gpu", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
}


def pod_verdict(kubectl: Kubectl, toleration: dict[str, Any]) -> bool:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], "tolerations": [toleration]},
    }
    return kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False).returncode == 0


def run_doc(toleration: dict[str, Any]) -> dict[str, Any]:
    return merge(base(), {"metadata": {"name": "probe"}, "spec": {"scheduling": {"tolerations": [toleration]}}})


@pytest.mark.parametrize("label", TOLERATIONS)
def test_a_toleration_is_accepted_exactly_when_the_api_server_accepts_it_on_a_pod(label: str, kubectl: Kubectl) -> None:
    toleration = TOLERATIONS[label]
    pod_ok = pod_verdict(kubectl, toleration)
    crd_ok = (
        kubectl(
            "apply", "--dry-run=server", "-n", "default", "-f", "-", input=json.dumps(run_doc(toleration)), check=False
        ).returncode
        == 0
    )
    python_ok = parse_run(run_doc(toleration))[0] is not None
    assert (crd_ok, python_ok) == (pod_ok, pod_ok), f"pod {pod_ok}, GRPORun CRD {crd_ok}, grpo validate {python_ok}"


@pytest.mark.parametrize("arg", ["--x\x00y", "--a\nb", "--esc\x1b[2J", "--tab\there"])
def test_a_control_character_in_extra_args_is_refused_by_the_crd_and_grpo_validate(arg: str, kubectl: Kubectl) -> None:
    doc = merge(base(), {"metadata": {"name": "probe"}, "spec": {"extraArgs": [arg]}})
    applied = kubectl("apply", "--dry-run=server", "-n", "default", "-f", "-", input=json.dumps(doc), check=False)
    assert applied.returncode != 0 and "extraArgs" in applied.stderr
    run, problems = parse_run(doc)
    assert run is None and problems[0].path == "spec.extraArgs[0]" and "control character" in problems[0].message


# Values the render puts into the Ray pods' templates (#26): (GRPORun spec patch, the same value on a Pod).
POD_VALUES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "node selector key with a space": (
        {"scheduling": {"gpuNodeSelector": {"gpu type": "h200"}}},
        {"nodeSelector": {"gpu type": "h200"}},
    ),
    "node selector key with a prefix": (
        {"scheduling": {"gpuNodeSelector": {"example.com/gpu": "h200"}}},
        {"nodeSelector": {"example.com/gpu": "h200"}},
    ),
    "node selector key with a long prefix": (
        {"scheduling": {"headNodeSelector": {"a" * 254 + "/x": "y"}}},
        {"nodeSelector": {"a" * 254 + "/x": "y"}},
    ),
    "secret name with an empty label": (
        {"hfTokenSecret": {"name": "a..b"}},
        {"env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "a..b", "key": "HF_TOKEN"}}}]},
    ),
    "secret name with dots": (
        {"hfTokenSecret": {"name": "hf.token"}},
        {"env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf.token", "key": "HF_TOKEN"}}}]},
    ),
    "secret key dotdot": (
        {"hfTokenSecret": {"name": "hf", "key": ".."}},
        {"env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": ".."}}}]},
    ),
    "claim over /dev/shm": ({"storage": {"mountPath": "/dev/shm"}}, {"mountPath": "/dev/shm"}),
    "claim over the run config": ({"storage": {"mountPath": "/etc/grpo"}}, {"mountPath": "/etc/grpo"}),
    "claim at /fsx": ({"storage": {"mountPath": "/fsx"}}, {"mountPath": "/fsx"}),
}


def pod_with(value: dict[str, Any]) -> dict[str, Any]:
    """A Pod shaped like a Ray worker: /dev/shm and the run config mounted, then the spec's value."""
    container: dict[str, Any] = {
        "name": "c",
        "image": "busybox",
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "cfg", "mountPath": "/etc/grpo"}],
    }
    volumes = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}, {"name": "cfg", "emptyDir": {}}]
    spec: dict[str, Any] = {"containers": [container], "volumes": volumes}
    if "mountPath" in value:
        container["volumeMounts"].append({"name": "shared", "mountPath": value["mountPath"]})
        volumes.append({"name": "shared", "persistentVolumeClaim": {"claimName": "c"}})
    if "env" in value:
        container["env"] = value["env"]
    if "nodeSelector" in value:
        spec["nodeSelector"] = value["nodeSelector"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": "default"}, "spec": spec}


@pytest.mark.parametrize("label", POD_VALUES)
def test_a_pod_template_value_is_accepted_exactly_when_the_api_server_accepts_it_on_a_pod(
    label: str, kubectl: Kubectl
) -> None:
    patch, value = POD_VALUES[label]
    pod_ok = kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(pod_with(value)), check=False)
    doc = merge(base(), {"metadata": {"name": "probe"}, "spec": patch})
    crd_ok = kubectl("apply", "--dry-run=server", "-n", "default", "-f", "-", input=json.dumps(doc), check=False)
    run, _ = parse_run(doc)
    python_ok = run is not None and not errors(validate(run))
    verdicts = (pod_ok.returncode == 0, crd_ok.returncode == 0, python_ok)
    assert verdicts[1:] == (verdicts[0], verdicts[0]), f"pod, GRPORun CRD, grpo validate: {verdicts}"
