"""`grpo validate` checks spec.extraArgs against the miles version of the run's GRPORuntime (`spec.milesVersion`,
default dec268f7): miles v0.1.0 removed `--disable-weights-backuper` and gave `--use-session-server` an optional
value (docs/integrations/miles.md, "miles v0.1.0")."""

from __future__ import annotations

from pathlib import Path

import pytest
from grpo_operator.cli import main

from tests.support.builders import EXAMPLES

RUN = (EXAMPLES / "runtimes" / "quickstart.yaml").read_text()
RUNTIME = (EXAMPLES / "runtimes" / "h100-infiniband.yaml").read_text()


@pytest.mark.parametrize(
    ("version", "extra", "code"),
    [
        pytest.param(None, ["--disable-weights-backuper"], 0, id="default-dec268f7-accepts-disable-weights-backuper"),
        pytest.param("dec268f7", ["--disable-weights-backuper"], 0, id="dec268f7-accepts-disable-weights-backuper"),
        pytest.param("v0.1.0", ["--disable-weights-backuper"], 1, id="v0.1.0-refuses-disable-weights-backuper"),
        pytest.param("v0.1.0", ["--use-session-server", "v2"], 0, id="v0.1.0-accepts-use-session-server-v2"),
    ],
)
def test_extra_args_are_checked_against_the_runtimes_miles_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str | None, extra: list[str], code: int
) -> None:
    run = tmp_path / "run.yaml"
    run.write_text(RUN.replace("\nspec:\n", f"\nspec:\n  extraArgs: {extra}\n", 1))
    runtime = tmp_path / "runtime.yaml"
    runtime.write_text(RUNTIME.replace("\nspec:\n", f"\nspec:\n  milesVersion: {version}\n", 1) if version else RUNTIME)
    assert main(["validate", "-f", str(run), "--runtime", str(runtime)]) == code
    out = capsys.readouterr()
    text = out.out + out.err
    assert "Traceback" not in text
    if code:
        line = next(line for line in text.splitlines() if "spec.extraArgs[0]" in line)
        assert "--disable-weights-backuper is not a flag of miles radixark/miles@78527b91" in line
