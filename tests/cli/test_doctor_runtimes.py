"""`grpo doctor` on a cluster a platform team describes with its own GRPORuntime: the GPU nodes are the runtime's
node types, found by their nodeSelector, each with its fabric's devices counted (rdma/ib here, not EFA); a runtime
named default replaces the built-in AWS types; a run that names the runtime is judged on its node type."""

from __future__ import annotations

import copy
from typing import Any

import yaml
from grpo_dev.localcluster.simcluster import gpu_node
from grpo_operator.cli.doctorchecks import Check, Cluster, Target, Verdict, checks
from grpo_operator.planning.documents import parse_run, parse_runtime
from grpo_operator.planning.instances import InstanceType
from grpo_operator.planning.validation import check

from tests.support.builders import EXAMPLES
from tests.support.doctor import healthy

RUNTIME: dict[str, Any] = yaml.safe_load((EXAMPLES / "runtimes" / "h100-infiniband.yaml").read_text())
SELECTOR = "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3"


def h100() -> InstanceType:
    runtime, problems = parse_runtime(RUNTIME)
    assert runtime is not None, problems
    return InstanceType.of(runtime.spec.instance_types[0])


def ready(node: dict[str, Any]) -> dict[str, Any]:
    node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return node


def with_h100(*rdma: int, runtimes: list[dict[str, Any]] | None = None) -> Cluster:
    """The healthy quickstart cluster plus an H100 node per entry of `rdma` (its rdma/ib devices allocatable)."""
    cluster = healthy()
    cluster.nodes += [ready(gpu_node(f"h100-{i}", h100(), devices=count)) for i, count in enumerate(rdma)]
    cluster.runtimes = [RUNTIME] if runtimes is None else runtimes
    return cluster


def verdict(cluster: Cluster, name: str, target: Target | None = None) -> Check:
    return {c.name: c for c in checks(cluster, target)}[name]


def ib_target() -> Target:
    runtime, _ = parse_runtime(RUNTIME)
    run, problems = parse_run(yaml.safe_load((EXAMPLES / "runtimes" / "quickstart.yaml").read_text()), runtime)
    assert run is not None, problems
    result = check(run)
    assert result.plan is not None
    return Target(run, result.plan)


def test_without_a_run_the_gpu_nodes_include_the_cluster_runtimes_types_found_by_their_node_selector() -> None:
    nodes = verdict(with_h100(8, 8), "GPU nodes")
    assert nodes.verdict is Verdict.OK, nodes
    assert nodes.found.startswith("2 x h100-ib, 1 x p5.48xlarge, 3 x p5en.48xlarge, 1 x p6-b200"), nodes


def test_a_node_short_of_its_runtimes_fabric_devices_fails_naming_that_resource() -> None:
    nodes = verdict(with_h100(8, 0), "GPU nodes")
    assert nodes.verdict is Verdict.FAIL
    assert "allocatable short: h100-1: rdma/ib 0 of h100-ib's 8" in nodes.found, nodes


def test_a_runtime_named_default_replaces_the_built_in_types() -> None:
    default = copy.deepcopy(RUNTIME)
    default["metadata"]["name"] = "default"
    nodes = verdict(with_h100(8, runtimes=[default]), "GPU nodes")
    assert nodes.verdict is Verdict.OK and nodes.found.startswith("1 x h100-ib, each"), nodes


def test_a_run_on_the_runtime_is_judged_on_its_node_type_and_the_taints_its_type_tolerates() -> None:
    target = ib_target()
    none = verdict(with_h100(), "GPU nodes", target)
    assert none.verdict is Verdict.FAIL and none.found == f"no node of h100-ib ({SELECTOR})", none
    one = verdict(with_h100(8), "GPU nodes", target)
    assert one.verdict is Verdict.FAIL and one.found == "1 x h100-ib; the run needs 2 nodes of h100-ib", one
    cluster = with_h100(8, 8)
    assert verdict(cluster, "GPU nodes", target).verdict is Verdict.OK
    assert verdict(cluster, "taints", target).verdict is Verdict.OK
    cluster.nodes[-1]["spec"]["taints"].append({"key": "ib", "value": "maintenance", "effect": "NoSchedule"})
    taints = verdict(cluster, "taints", target)
    assert taints.verdict is Verdict.FAIL and "h100-1 (ib=maintenance:NoSchedule)" in taints.found, taints


def test_without_a_run_a_node_is_checked_against_its_own_types_tolerations() -> None:
    cluster = with_h100(8)
    cluster.nodes[-1]["spec"]["taints"].append({"key": "ib", "value": "maintenance", "effect": "NoSchedule"})
    taints = verdict(cluster, "taints")
    assert taints.verdict is Verdict.FAIL and taints.found.endswith("h100-0 (ib=maintenance:NoSchedule)"), taints
