"""The rules a GRPORuntime's own fields follow in Python (`grpo validate` on a runtime, and the operator reading
one), as the API server's CEL holds them: a fabric's members follow its type, the env it sets has names a
container takes, instance types are named once, and the default type is one of them. Each refusal names the
rule and the fix; the neighbouring case passes."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from grpo_operator.planning.documents import parse_runtime

from tests.support.builders import EXAMPLES

IB = yaml.safe_load((EXAMPLES / "runtimes" / "h100-infiniband.yaml").read_text())


def _parse(change: Any) -> tuple[Any, list[str]]:
    doc = copy.deepcopy(IB)
    change(doc["spec"])
    parsed, problems = parse_runtime(doc)
    return parsed, [str(p) for p in problems]


def _fabric(**fabric: Any) -> tuple[Any, list[str]]:
    def change(spec: dict[str, Any]) -> None:
        spec["instanceTypes"][0]["fabric"] = fabric

    return _parse(change)


def test_the_fabric_env_a_runtime_sets_is_what_its_instance_type_carries() -> None:
    parsed, problems = _parse(lambda spec: None)
    assert parsed is not None, problems
    assert parsed.spec.instance_types[0].fabric.env == {"NCCL_IB_HCA": "mlx5", "NCCL_SOCKET_IFNAME": "eth0"}


@pytest.mark.parametrize(
    "name",
    ["NCCL_IB_HCA", "_x", "-a.b", "N" * 128],
    ids=["upper case and underscores", "a leading underscore", "a leading dash and a dot", "128 characters"],
)
def test_an_env_name_a_container_takes_is_accepted(name: str) -> None:
    parsed, problems = _fabric(type="infiniband", resourceName="rdma/ib", count=8, env={name: "1"})
    assert parsed is not None and parsed.spec.instance_types[0].fabric.env == {name: "1"}, problems


@pytest.mark.parametrize("name", ["1NCCL", "NCCL IB", "N" * 129], ids=["a leading digit", "a space", "129 characters"])
def test_an_env_name_a_container_refuses_is_refused_naming_the_key_and_the_rule(name: str) -> None:
    parsed, problems = _fabric(type="infiniband", resourceName="rdma/ib", count=8, env={name: "1"})
    assert parsed is None
    # a long key is cut in the message (echo), so the key's start is what it names
    assert any(
        p.startswith("spec.instanceTypes[0].fabric.env")
        and f"key '{name[:20]}" in p
        and "is not an environment variable name" in p
        for p in problems
    ), problems


@pytest.mark.parametrize(
    "fabric",
    [{"type": "none"}, {"type": "efa", "resourceName": "vpc.amazonaws.com/efa", "count": 32}],
    ids=["none alone", "efa with its resource and count"],
)
def test_a_fabric_whose_members_follow_its_type_is_accepted(fabric: dict[str, Any]) -> None:
    parsed, problems = _fabric(**fabric)
    assert parsed is not None, problems


@pytest.mark.parametrize("members", [{"resourceName": "rdma/ib"}, {"count": 8}], ids=["a resource name", "a count"])
def test_none_with_a_device_resource_or_count_is_refused(members: dict[str, Any]) -> None:
    parsed, problems = _fabric(type="none", **members)
    assert parsed is None
    assert any("resourceName and count must be unset for none" in p for p in problems), problems


@pytest.mark.parametrize("members", [{"resourceName": "rdma/ib"}, {"count": 8}], ids=["no count", "no resource name"])
def test_infiniband_without_its_resource_or_count_is_refused(members: dict[str, Any]) -> None:
    parsed, problems = _fabric(type="infiniband", **members)
    assert parsed is None
    assert any("resourceName and count are required for fabric infiniband" in p for p in problems), problems


def test_an_instance_type_named_twice_is_refused() -> None:
    def twice(spec: dict[str, Any]) -> None:
        spec["instanceTypes"].append(copy.deepcopy(spec["instanceTypes"][0]))

    parsed, problems = _parse(twice)
    assert parsed is None
    assert any("instanceTypes names must be unique; 'h100-ib' appears twice" in p for p in problems), problems


def test_a_default_instance_type_the_runtime_does_not_offer_is_refused_with_the_ones_it_does() -> None:
    def default(spec: dict[str, Any]) -> None:
        spec["defaults"]["instanceType"] = "h200-ib"

    parsed, problems = _parse(default)
    assert parsed is None
    assert any("defaults.instanceType 'h200-ib' is not one of instanceTypes (h100-ib)" in p for p in problems), problems


def test_a_runtime_name_of_253_characters_is_accepted_and_one_of_254_is_refused_naming_the_field() -> None:
    # An object's name is a DNS subdomain of at most 253 characters: the API server never stores a longer one,
    # so a runtime named so could never be found by a run's runtimeRef.
    for length, valid in ((253, True), (254, False)):
        doc = copy.deepcopy(IB)
        doc["metadata"]["name"] = "r" * length
        parsed, problems = parse_runtime(doc)
        assert (parsed is not None) is valid, (length, [str(p) for p in problems])
        if not valid:
            assert any(p.path == "metadata.name" and "253" in p.message for p in problems), [str(p) for p in problems]
