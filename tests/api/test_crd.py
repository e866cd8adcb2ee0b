"""The CRD is generated from the types, checked in, and structural."""

from __future__ import annotations

from typing import Any

import yaml
from grpo_dev import crdgen

EXPECTED_COLUMNS = ["Phase", "Model", "Progress", "Reward", "Repetition", "Eval", "GPU-Hours", "Age"]


def walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        out.append((path, node))
        for key, value in node.get("properties", {}).items():
            out += walk(value, f"{path}.{key}")
        if isinstance(node.get("items"), dict):
            out += walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            out += walk(node["additionalProperties"], f"{path}{{}}")
    return out


def test_checked_in_crds_match_the_types_run_make_crds_if_not() -> None:
    expected = yaml.safe_load(crdgen.render())
    for path in crdgen.OUTPUTS:
        assert path.exists(), f"{path} is missing: run make crds"
        assert yaml.safe_load(path.read_text()) == expected, f"{path} is stale: run make crds"


def test_the_checked_in_crd_is_byte_for_byte_what_make_crds_writes() -> None:
    assert crdgen.OUTPUTS[0].read_text() == crdgen.render(), "run make crds"


def test_schema_is_structural() -> None:
    schema = crdgen.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in walk(schema):
        for forbidden in ("$ref", "$defs", "anyOf", "oneOf", "allOf", "title", "const"):
            assert forbidden not in node, f"{path} has {forbidden}"
        assert "type" in node, f"{path} has no type"
        if "properties" in node:
            assert node["type"] == "object" and "additionalProperties" not in node, path
        if isinstance(node.get("exclusiveMinimum"), (int, float)) and not isinstance(node["exclusiveMinimum"], bool):
            raise AssertionError(f"{path} uses a numeric exclusiveMinimum")


def test_every_spec_field_has_a_description_for_kubectl_explain() -> None:
    schema = crdgen.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    missing = [
        p
        for p, n in walk(schema["properties"]["spec"], ".spec")
        if p and not p.endswith("[]") and "{" not in p and "description" not in n
    ]
    assert missing == []


def test_defaults_and_enums_reach_the_schema() -> None:
    spec = crdgen.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    topology = spec["topology"]["properties"]
    assert topology["placement"]["enum"] == ["Colocated", "Disaggregated"]
    assert topology["placement"]["default"] == "Colocated"
    assert spec["guards"]["properties"]["action"]["default"] == "Stop"
    assert "default" not in spec["guards"], "a runtime's defaults.guards would never apply"
    assert spec["topology"]["default"]["actor"] == {"nodes": 1, "gpusPerNode": 8}
    assert spec["data"]["properties"]["inputKey"]["default"] == "prompt"
    assert spec["rollout"]["properties"]["temperature"]["exclusiveMinimum"] is True


def test_cross_field_rules_are_declared_as_cel() -> None:
    spec = crdgen.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rules = [r["rule"] for r in spec["x-kubernetes-validations"]]
    rules += [r["rule"] for r in spec["properties"]["topology"]["x-kubernetes-validations"]]
    rules += [r["rule"] for r in spec["properties"]["reward"]["x-kubernetes-validations"]]
    joined = "\n".join(rules)
    for fragment in (
        "self.placement != 'Colocated'",
        "% self.rollout.gpusPerEngine == 0",
        "self.rollout.batchSize * self.rollout.samplesPerPrompt",
        "has(self.remote)",
        "oldSelf",
    ):
        assert fragment in joined


def test_status_keys_printer_columns_and_names() -> None:
    version = crdgen.crd()["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    assert [c["name"] for c in version["additionalPrinterColumns"]][:8] == EXPECTED_COLUMNS
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert {
        "phase",
        "conditions",
        "observedGeneration",
        "progress",
        "metrics",
        "plan",
        "rayClusterName",
        "jobSubmissionId",
        "startTime",
        "completionTime",
        "reason",
        "message",
        "accounting",
    } <= set(status)
    assert status["conditions"]["x-kubernetes-list-type"] == "map"
    names = crdgen.crd()["spec"]["names"]
    assert names["shortNames"] == ["grpo"] and names["kind"] == "GRPORun"
