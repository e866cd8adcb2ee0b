"""The real kubectl and `grpo` read the same YAML the same way: what `grpo render` prints reaches kubectl as
the manifests that were rendered, and the constructs where YAML readers differ (merge keys, directives,
strings that look like numbers) decode in `grpo validate` exactly as in kubectl.

kubectl is run as `kubectl label --local -f - -o json`: it parses the file with its own decoder
(sigs.k8s.io/yaml over go-yaml v2) and prints the objects as JSON without contacting a server.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
import yaml
from grpo_dev.localcluster.build import tool_path
from grpo_operator.cli.loading import parse_run
from grpo_operator.cli.yamldecode import YamlError, decode_all
from grpo_operator.planning.plan import make_plan
from grpo_operator.render import render
from grpo_operator.render.yamlout import dump_all

from tests.render.golden import SETTINGS, valid_examples
from tests.support.yamltexts import MERGES, STRINGS_THAT_LOOK_TYPED

pytestmark = pytest.mark.integration


def kubectl_reads(text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tool_path("kubectl")), "label", "--local", "-f", "-", "-o", "json", "grpo.dev/probe=1"],
        input=text,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def objects(output: str) -> list[dict[str, Any]]:
    """The objects kubectl printed: one JSON document per object, one after another."""
    decoder, items, at = json.JSONDecoder(), [], 0
    while output[at:].strip():
        item, end = decoder.raw_decode(output, at + len(output[at:]) - len(output[at:].lstrip()))
        items.append(item)
        at = end
    for item in items:
        item["metadata"]["labels"].pop("grpo.dev/probe")
        if not item["metadata"]["labels"]:
            item["metadata"].pop("labels")
    return items


def config_map(data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "probe"}, "data": data}


def test_rendered_strings_that_look_like_numbers_booleans_or_null_reach_kubectl_as_strings() -> None:
    data = {f"k{i}": value for i, value in enumerate(STRINGS_THAT_LOOK_TYPED)}
    read = kubectl_reads(dump_all([config_map(data)]))
    assert read.returncode == 0, read.stderr
    assert objects(read.stdout)[0]["data"] == data


@pytest.mark.parametrize("example", valid_examples(), ids=lambda p: p.name)
def test_grpo_render_output_reaches_kubectl_as_the_rendered_manifests(example: Any) -> None:
    run, _ = parse_run(yaml.safe_load(example.read_text()))
    assert run is not None
    children = render(run, make_plan(run), SETTINGS).children
    read = kubectl_reads(dump_all(children))
    assert read.returncode == 0, read.stderr
    assert objects(read.stdout) == json.loads(json.dumps(children))


@pytest.mark.parametrize("label", MERGES)
def test_merge_keys_decode_in_grpo_validate_as_in_kubectl(label: str) -> None:
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: probe}\n" + MERGES[label][0].replace("d:\n", "data:\n")
    read = kubectl_reads(text)
    assert read.returncode == 0, read.stderr
    assert decode_all(text)[0]["data"] == objects(read.stdout)[0]["data"]


@pytest.mark.parametrize("directive", ["%YAML 1.2", "%YAML 1.1", "%TAG !e! tag:example.com,2000:"])
def test_a_directive_is_refused_by_kubectl_and_by_grpo_validate(directive: str) -> None:
    text = f"{directive}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: probe}}\ndata: {{a: '1'}}\n"
    assert kubectl_reads(text).returncode != 0
    with pytest.raises(YamlError):
        decode_all(text)
