"""How a document that is not a valid GRPORun or GRPORuntime is reported, as `grpo validate` and the operator
both print it: an unknown field with the fields allowed at that place (through a list, an optional object and
a plain one), a Python field name refused as the API server refuses it, a control character named as such,
and a wrong kind, apiVersion or shape named with what to set."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from grpo_operator.api import API_VERSION
from grpo_operator.planning.documents import parse_run, parse_runtime

from tests.support.builders import EXAMPLES, base, merge

IB = yaml.safe_load((EXAMPLES / "runtimes" / "h100-infiniband.yaml").read_text())


def _run_problems(doc: Any) -> list[str]:
    run, problems = parse_run(doc)
    assert run is None
    return [str(p) for p in problems]


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        (
            {"storage": {"mountpath": "/x"}},
            "spec.storage.mountpath: unknown field; allowed here: claimName, mountPath, checkpointDir, "
            "tensorboardDir, saveInterval, checkpointOnSuspend, writeGBps",
        ),
        (
            {"scheduling": {"tolerations": [{"key": "a", "operator": "Exists", "bogus": 1}]}},
            "spec.scheduling.tolerations[0].bogus: unknown field; allowed here: key, operator, value, effect, "
            "tolerationSeconds",
        ),
        (
            {"reward": {"type": "remote", "remote": {"replicas": 1, "bogus": 1}}},
            "spec.reward.remote.bogus: unknown field; allowed here: backend, replicas, timeoutSeconds, image",
        ),
        (
            {"guards": {"minReward": {"value": 0.1, "bogus": 1}}},
            "spec.guards.minReward.bogus: unknown field; allowed here: value, afterRollouts",
        ),
        (
            {"storage": {"claim_name": "x"}},
            "spec.storage.claim_name: unknown field; allowed here: claimName, mountPath, checkpointDir, "
            "tensorboardDir, saveInterval, checkpointOnSuspend, writeGBps",
        ),
    ],
    ids=[
        "storage.mountpath",
        "a toleration's bogus",
        "reward.remote.bogus",
        "guards.minReward.bogus",
        "storage.claim_name",
    ],
)
def test_an_unknown_field_is_named_with_the_fields_allowed_there(patch: dict[str, Any], expected: str) -> None:
    assert _run_problems(merge(base(), {"spec": patch})) == [expected]


def test_a_control_character_is_named_as_one() -> None:
    assert _run_problems(merge(base(), {"spec": {"extraArgs": ["--lr\x1b"]}})) == [
        'spec.extraArgs[0]: "--lr\\\\u001b" contains a control character (NUL, tab, newline, ESC, ...), which the '
        "process would receive as is; remove it"
    ]


def test_a_pattern_broken_otherwise_is_not_called_a_control_character() -> None:
    [problem] = _run_problems(merge(base(), {"spec": {"scheduling": {"queueName": "Bad_Queue"}}}))
    assert problem.startswith('spec.scheduling.queueName: "Bad_Queue" is invalid: String should match pattern'), problem


def test_a_list_or_a_string_is_not_a_run() -> None:
    assert _run_problems([base()]) == ["(document): expected a mapping (a GRPORun object), got a list"]
    assert _run_problems("spec: {}") == ["(document): expected a mapping (a GRPORun object), got a str"]


def test_a_run_with_a_python_field_name_is_refused_as_the_api_server_refuses_it() -> None:
    doc = base()
    doc["spec"]["storage"]["claim_name"] = doc["spec"]["storage"].pop("claimName")
    found = _run_problems(doc)
    assert any(p.startswith("spec.storage.claim_name: unknown field") for p in found), found


@pytest.mark.parametrize(("field", "value"), [("apiVersion", "v1"), ("kind", "GRPORuntime")])
def test_a_run_of_another_api_version_or_kind_is_refused_with_what_to_set(field: str, value: str) -> None:
    [problem] = _run_problems({**base(), field: value})
    assert problem.startswith("(document): apiVersion ") and problem.endswith(
        f"is not a GRPORun: set apiVersion: {API_VERSION} and kind: GRPORun"
    ), problem


def test_a_run_given_as_a_runtime_is_refused_naming_its_kind() -> None:
    assert [str(p) for p in parse_runtime(base())[1]] == [
        f"(document): kind 'GRPORun' is not a GRPORuntime: set apiVersion: {API_VERSION} and kind: GRPORuntime"
    ]


def test_a_runtime_of_another_api_version_or_a_list_is_refused() -> None:
    assert parse_runtime({**IB, "apiVersion": "v1"})[0] is None
    assert [str(p) for p in parse_runtime([IB])[1]] == [
        f"(document): list is not a GRPORuntime: set apiVersion: {API_VERSION} and kind: GRPORuntime"
    ]


def test_a_runtime_with_a_python_field_name_is_refused_as_the_api_server_refuses_it() -> None:
    doc = {**IB, "spec": {**{k: v for k, v in IB["spec"].items() if k != "instanceTypes"}}}
    doc["spec"]["instance_types"] = IB["spec"]["instanceTypes"]
    parsed, problems = parse_runtime(doc)
    assert parsed is None
    assert any(str(p).startswith("spec.instance_types: unknown field") for p in problems), problems
