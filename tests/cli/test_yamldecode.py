"""The YAML reader on `!!binary` scalars: decoded as kubectl decodes them, refused with one line when not base64."""

from __future__ import annotations

import base64

import pytest
from grpo_operator.cli.loading import load_documents

from tests.support.builders import EXAMPLES

QUICKSTART = (EXAMPLES / "quickstart.yaml").read_text()


def with_num_rollout(value: str) -> str:
    assert "    numRollout: 20\n" in QUICKSTART
    return QUICKSTART.replace("    numRollout: 20\n", f"    numRollout: {value}\n")


@pytest.mark.parametrize(
    "written",
    [
        "!!binary aGVsbG8=\u00e9",  # valid base64, then a non-ASCII character
        "!!binary \u00e9",
        "!!binary not*base64",
        "!!binary aGVsbG8",  # padding missing
    ],
)
def test_a_binary_scalar_that_is_not_base64_is_one_problem_naming_its_position(written: str) -> None:
    documents, problems = load_documents(with_num_rollout(written))
    assert documents == []
    assert [str(p) for p in problems] == [
        f"(file): not valid YAML at line {with_num_rollout(written).splitlines().index('    numRollout: ' + written) + 1}, "
        "column 17: !!binary value contains invalid base64 data"
    ]


def test_a_binary_scalar_reads_as_the_text_it_encodes() -> None:
    encoded = base64.b64encode(b"GRPORun").decode()
    documents, problems = load_documents(QUICKSTART.replace("kind: GRPORun", f"kind: !!binary {encoded}"))
    assert problems == []
    assert [d.problems for d in documents] == [[]]
    assert documents[0].run is not None
