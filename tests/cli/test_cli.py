"""`grpo validate` and `grpo plan` as a user runs them: exit codes, one line per problem, no tracebacks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.builders import EXAMPLES, PYTHON_ONLY_INVALID_EXAMPLES
from tests.support.cli import grpo

ALL_EXAMPLES = sorted(p.name for p in EXAMPLES.glob("*.yaml"))


@pytest.mark.parametrize("name", ALL_EXAMPLES)
def test_every_example_validates_except_the_72b_one(name: str) -> None:
    result = grpo("validate", "-f", str(EXAMPLES / name))
    if name in PYTHON_ONLY_INVALID_EXAMPLES:
        assert result.returncode == 1
        assert "GiB per GPU" in result.stdout
    else:
        assert result.returncode == 0, result.stdout
        assert result.stdout.strip().endswith("valid")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("name", ALL_EXAMPLES)
def test_plan_prints_a_table_and_json_with_the_contract_keys(name: str) -> None:
    table = grpo("plan", "-f", str(EXAMPLES / name))
    assert "workers" in table.stdout and "fits" in table.stdout
    data = json.loads(grpo("plan", "-f", str(EXAMPLES / name), "-o", "json").stdout)
    for key in (
        "workerReplicas",
        "totalGpus",
        "efaPerNode",
        "actorGiBPerGpu",
        "rolloutGiBPerGpu",
        "gpuGiB",
        "checkpointGiB",
        "fits",
    ):
        assert key in data["plan"], key


BAD_INPUTS = {
    "empty file": ("", "empty"),
    "not yaml": ("spec: [1, 2\n", "not valid YAML at line"),
    "a list": ("- a\n- b\n", "expected a mapping"),
    "wrong kind": ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n", "is not a GRPORun"),
    "wrong version": ("apiVersion: grpo.dev/v1\nkind: GRPORun\n", "is not a GRPORun"),
}


@pytest.mark.parametrize("label", BAD_INPUTS)
def test_bad_files_get_one_clear_line_and_exit_1(label: str) -> None:
    text, expected = BAD_INPUTS[label]
    result = grpo("validate", "-f", "-", stdin=text)
    assert result.returncode == 1
    assert expected in result.stdout
    assert len(result.stdout.strip().splitlines()) == 1
    assert "Traceback" not in result.stdout + result.stderr


def test_field_errors_are_one_line_each_naming_the_path() -> None:
    text = (EXAMPLES / "qwen3-4b-colocated.yaml").read_text()
    text = text.replace("numRollout: 100", 'numRollout: "100"').replace("batchSize: 16", "batchSize: -16")
    text = text.replace("profile: qwen3-4b", "profile: qwen3-4b\n    colour: blue")
    result = grpo("validate", "-f", "-", stdin=text)
    assert result.returncode == 1
    lines = result.stdout.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "spec.model.colour",
        "spec.rollout.numRollout",
        "spec.rollout.batchSize",
    ]


def test_multi_document_files_are_checked_document_by_document(tmp_path: Path) -> None:
    good = (EXAMPLES / "quickstart.yaml").read_text()
    bad = good.replace("name: quickstart", "name: broken").replace("globalBatchSize: 128", "globalBatchSize: 100")
    both = tmp_path / "both.yaml"
    both.write_text(good + "\n---\n" + bad)
    result = grpo("validate", "-f", str(both))
    assert result.returncode == 1
    assert "quickstart: valid" in result.stdout
    assert "broken: spec.training.globalBatchSize: GRPO batch identity" in result.stdout
    rows = json.loads(grpo("validate", "-f", str(both), "-o", "json").stdout)
    assert [r["valid"] for r in rows] == [True, False]


def test_a_missing_file_is_one_line_not_a_traceback() -> None:
    result = grpo("validate", "-f", "/nonexistent/run.yaml")
    assert result.returncode == 1 and "cannot read" in result.stderr and "Traceback" not in result.stderr
