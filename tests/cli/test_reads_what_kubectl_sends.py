"""`grpo validate` reads a file as `kubectl apply` sends it to the API server, and its messages show the values
that were written, escaped and cut.

What kubectl does with each construct was taken from the real kubectl binary (`kubectl label --local -f -
-o json`); `tests/integration/cli/test_kubectl_yaml.py` compares the two readers on the same texts.
"""

from __future__ import annotations

import pytest
import yaml
from grpo_operator.cli import check_text
from grpo_operator.cli.yamldecode import YamlError, decode_all
from grpo_operator.planning.validation import Severity
from grpo_operator.render.yamlout import dump_all

from tests.support.builders import BASE_EXAMPLE, base, merge
from tests.support.yamltexts import MERGES, STRINGS_THAT_LOOK_TYPED

QUICKSTART = BASE_EXAMPLE.read_text()


def problems(doc: dict) -> list[str]:  # type: ignore[type-arg]
    checked, file_problems = check_text(yaml.safe_dump(doc))
    assert not file_problems
    return [str(p) for c in checked for p in c.problems]


def test_a_snake_case_field_name_is_refused_as_the_api_server_refuses_it() -> None:
    doc = base()
    doc["spec"]["rollout"]["batch_size"] = doc["spec"]["rollout"].pop("batchSize")
    found = problems(doc)
    assert any(p.startswith("spec.rollout.batch_size: unknown field; allowed here:") for p in found), found


def test_a_namespace_that_is_not_a_dns_label_is_refused() -> None:
    found = problems(merge(base(), {"metadata": {"namespace": "Team_A"}}))
    assert any(p.startswith("metadata.namespace:") and "DNS label" in p for p in found), found


def test_toleration_seconds_beyond_int64_is_refused() -> None:
    toleration = {"key": "gpu", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 2**63}
    found = problems(merge(base(), {"spec": {"scheduling": {"tolerations": [toleration]}}}))
    assert any("tolerationSeconds" in p and "int64" in p for p in found), found


def test_two_runs_with_one_name_in_one_file_are_warned() -> None:
    checked, _ = check_text(QUICKSTART + "\n---\n" + QUICKSTART)
    warnings = [p for p in checked[1].problems if p.severity is Severity.WARNING and p.path == "metadata.name"]
    assert warnings and "document 1" in warnings[0].message
    assert not [p for p in checked[0].problems if p.path == "metadata.name"]


@pytest.mark.parametrize("directive", ["%YAML 1.2", "%YAML 1.1", "%TAG !e! tag:example.com,2000:"])
def test_a_yaml_directive_is_refused_as_kubectl_cannot_read_it(directive: str) -> None:
    with pytest.raises(YamlError, match="directive"):
        decode_all(f"{directive}\n---\n{QUICKSTART}")


@pytest.mark.parametrize("label", MERGES)
def test_merge_keys_resolve_as_kubectl_resolves_them(label: str) -> None:
    text, kubectl_reads = MERGES[label]
    assert decode_all(text)[0]["d"] == kubectl_reads


@pytest.mark.parametrize("value", STRINGS_THAT_LOOK_TYPED)
def test_grpo_render_quotes_a_string_that_kubectl_would_read_as_another_type(value: str) -> None:
    text = dump_all([{"data": {"a": value}}])
    assert decode_all(text)[0]["data"]["a"] == value, text


def test_a_bidi_override_in_a_value_is_shown_escaped_in_the_message() -> None:
    found = problems(merge(base(), {"spec": {"storage": {"checkpointDir": "/tmp/\u202eckpt\x9b2J"}}}))
    line = next(p for p in found if p.startswith("spec.storage.checkpointDir"))
    assert "\\u202e" in line and "\\x9b" in line and "\u202e" not in line and "\x9b" not in line


def test_a_long_value_is_cut_in_the_message() -> None:
    found = problems(merge(base(), {"spec": {"storage": {"checkpointDir": "/tmp/" + "x" * 500}}}))
    line = next(p for p in found if p.startswith("spec.storage.checkpointDir"))
    assert "x" * 61 not in line and "..." in line
