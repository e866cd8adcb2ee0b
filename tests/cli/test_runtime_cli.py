"""`grpo validate --runtime FILE` with a runtime file that is wrong: one line naming where and why, exit status 1,
never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from grpo_operator.cli import main

from tests.support.builders import EXAMPLES

RUN = str(EXAMPLES / "runtimes" / "quickstart.yaml")
GOOD = (EXAMPLES / "runtimes" / "h100-infiniband.yaml").read_text()


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("a: [1, 2", "not valid YAML"),
        ("", "holds 0 documents"),
        (GOOD + "---\n" + GOOD, "holds 2 documents"),
        (GOOD.replace("kind: GRPORuntime", "kind: GRPORun"), "is not a GRPORuntime"),
        (GOOD.replace("gpusPerNode: 8", "gpusPerNode: '8'"), "spec.instanceTypes[0].gpusPerNode"),
        (GOOD.replace("      gpuModel: H100", "      gpuModle: H100"), "unknown field; allowed here: name, gpuModel"),
        (GOOD.replace("count: 8", "count: 8\n        countt: 1"), "spec.instanceTypes[0].fabric.countt"),
    ],
    ids=["not-yaml", "empty", "two-documents", "a-run", "quoted-number", "misspelt-field", "misspelt-fabric-field"],
)
def test_a_wrong_runtime_file_is_one_line_and_exit_1(
    text: str, words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runtime = tmp_path / "runtime.yaml"
    runtime.write_text(text)
    assert main(["validate", "-f", RUN, "--runtime", str(runtime)]) == 1
    captured = capsys.readouterr()
    out = captured.out + captured.err
    assert words in out, out
    assert "Traceback" not in out


def test_a_missing_runtime_file_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "-f", RUN, "--runtime", str(tmp_path / "absent.yaml")]) == 1
    assert "cannot read" in capsys.readouterr().err
