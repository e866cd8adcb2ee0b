"""The RayCluster as KubeRay v1.5.0 reads it: the worker's Ray resources in KubeRay's own format, Service names
in the operator's cluster domain, and the CPU-only head off GPU nodes without a headNodeSelector."""

from __future__ import annotations

import json
import shlex

import pytest
from grpo_operator.cli.loading import parse_run
from grpo_operator.controller.config import SettingsError, load_settings
from grpo_operator.edges.endpoints import ray_address
from grpo_operator.planning.instances import INSTANCES
from grpo_operator.planning.plan import make_plan
from grpo_operator.render import render

from tests.support.builders import SETTINGS, example, kind, rendered, run_of


def _kuberay_resources_map(value: str) -> dict[str, float]:
    # kuberay v1.5.0 ray-operator/controllers/ray/common/pod.go:927-940 (getResourcesMap): trim, then unmarshal.
    return dict(json.loads(value.strip("'\"` ")))


def test_worker_ray_resources_parse_as_kuberay_parses_them_and_reach_ray_start_intact() -> None:
    result = rendered(example("qwen3-30b-a3b-combined"))
    value = kind(result, "RayCluster")["spec"]["workerGroupSpecs"][0]["rayStartParams"]["resources"]
    assert _kuberay_resources_map(value) == {"gpu_node": 1}
    # KubeRay writes `--resources=<value>` into the container's shell line (pod.go:971).
    flag, _, parsed = shlex.split(f"ray start --resources={value}")[-1].partition("=")
    assert flag == "--resources" and json.loads(parsed) == {"gpu_node": 1}


def test_service_names_use_the_operators_cluster_domain() -> None:
    settings = load_settings({"GRPO_CLUSTER_DOMAIN": "corp.internal"}).render
    assert settings.cluster_domain == "corp.internal"
    run = run_of(example("qwen3-4b-disaggregated"))
    argv = render(
        run, make_plan(run), settings.model_copy(update={"reward_image": SETTINGS.reward_image})
    ).job.miles_argv
    assert argv[argv.index("--rm-url") + 1].startswith(
        "http://qwen3-4b-disaggregated-reward.default.svc.corp.internal:"
    )


def test_a_bad_cluster_domain_stops_the_operator_with_one_line() -> None:
    with pytest.raises(SettingsError, match="GRPO_CLUSTER_DOMAIN"):
        load_settings({"GRPO_CLUSTER_DOMAIN": "Corp_Internal."})


def test_without_a_head_node_selector_the_head_requires_a_node_that_is_not_a_gpu_instance() -> None:
    head = kind(rendered(example("quickstart")), "RayCluster")["spec"]["headGroupSpec"]["template"]["spec"]
    (term,) = head["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    by_key = {e["key"]: e for e in term["matchExpressions"]}
    instance_types = by_key["node.kubernetes.io/instance-type"]
    assert instance_types["operator"] == "NotIn" and set(instance_types["values"]) == {str(n) for n in INSTANCES}
    assert by_key["nvidia.com/gpu.present"]["operator"] == "DoesNotExist"


def test_a_head_node_selector_replaces_the_default_affinity() -> None:
    doc = example("quickstart", {"scheduling": {"headNodeSelector": {"pool": "cpu"}}})
    head = kind(rendered(doc), "RayCluster")["spec"]["headGroupSpec"]["template"]["spec"]
    assert head["nodeSelector"] == {"pool": "cpu"} and "affinity" not in head


@pytest.mark.parametrize("name", ["quickstart", "qwen3-30b-a3b-combined"])
def test_workers_select_nodes_of_the_planned_instance_type(name: str) -> None:
    doc = example(name)
    worker = kind(rendered(doc), "RayCluster")["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    planned = doc["spec"].get("topology", {}).get("instanceType", "p5en.48xlarge")
    assert worker["nodeSelector"]["node.kubernetes.io/instance-type"] == planned


def test_a_gpu_node_selector_keeps_the_instance_type_and_may_not_contradict_it() -> None:
    doc = example("quickstart")
    doc["spec"]["scheduling"] = {"gpuNodeSelector": {"pool": "gpu"}}
    worker = kind(rendered(doc), "RayCluster")["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert worker["nodeSelector"] == {"node.kubernetes.io/instance-type": "p5en.48xlarge", "pool": "gpu"}
    doc["spec"]["scheduling"] = {"gpuNodeSelector": {"node.kubernetes.io/instance-type": "p6-b300.48xlarge"}}
    run, problems = parse_run(doc)
    assert run is None
    assert any(
        str(p).startswith(
            "spec.scheduling.gpuNodeSelector: node.kubernetes.io/instance-type: p6-b300.48xlarge conflicts with "
            "node.kubernetes.io/instance-type: p5en.48xlarge of instance type p5en.48xlarge"
        )
        for p in problems
    ), problems


# KubeRay v1.5.0 probes the head's dashboard for GCS health on this port, whatever rayStartParams say
# (ray-operator/controllers/ray/common/pod.go:371-375, utils/constant.go:98 DefaultDashboardPort).
KUBERAY_HEAD_PROBE_PORT = 8265


def test_the_head_serves_the_jobs_api_where_kuberays_probe_its_service_the_policy_and_the_operator_look() -> None:
    """Ray's dashboard (the Jobs API the operator submits to) is told its port, and it is the port KubeRay's
    head probes check, the head's containerPort (KubeRay's head Service), the NetworkPolicy's and the operator's."""
    run = run_of(example("qwen3-4b-disaggregated"))
    result = render(run, make_plan(run), SETTINGS)
    head = kind(result, "RayCluster")["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["dashboard-port"] == str(KUBERAY_HEAD_PROBE_PORT)
    [container] = head["template"]["spec"]["containers"]
    assert {"containerPort": KUBERAY_HEAD_PROBE_PORT, "name": "dashboard"} in container["ports"]
    policies = [c for c in result.children if c["kind"] == "NetworkPolicy"]
    allowed = [
        p["port"] for policy in policies for rule in policy["spec"].get("ingress", []) for p in rule.get("ports", [])
    ]
    assert KUBERAY_HEAD_PROBE_PORT in allowed
    address = ray_address("ns", run.metadata.name, load_settings({}))
    assert address.endswith(f".ns.svc.cluster.local:{KUBERAY_HEAD_PROBE_PORT}")
