"""A runtime's `interruptionNoticeSeconds` (EC2 spot: 120 s, whatever the pods' grace): `grpo validate` and
`grpo plan` warn when a rollout step plus a checkpoint save does not fit in it, naming both numbers; the run
stays valid (exit status 0)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from grpo_operator.cli import check_text, main
from grpo_operator.cli.loading import load_runtime

from tests.support.builders import EXAMPLES

RUN_FILE = EXAMPLES / "runtimes" / "quickstart.yaml"
RUNTIME_FILE = EXAMPLES / "runtimes" / "h100-infiniband.yaml"


def _runtime(notice: int | None, *, save_interval: bool = True) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(RUNTIME_FILE.read_text())
    if notice is not None:
        doc["spec"]["instanceTypes"][0]["interruptionNoticeSeconds"] = notice
    if not save_interval:
        del doc["spec"]["defaults"]["storage"]["saveInterval"]
    return doc


def _step_and_save() -> tuple[int, int]:
    """The quickstart's step (spec.preemption.stepSeconds, 600) and save (its checkpoint over writeGBps), as
    its plan's grace has them."""
    loaded, problems = load_runtime(yaml.safe_dump(_runtime(None)))
    assert loaded is not None and not problems
    checked, _ = check_text(RUN_FILE.read_text(), loaded)
    assert checked[0].plan is not None
    grace = checked[0].plan.preemption_grace
    return grace.step_seconds, grace.save_seconds


STEP, SAVE = _step_and_save()
NEEDED = STEP + SAVE


@pytest.mark.parametrize(
    ("notice", "save_interval", "warned"),
    [
        (120, True, True),
        (NEEDED - 1, True, True),
        (NEEDED, True, False),
        (NEEDED + 1, True, False),
        (3600, True, False),
        (None, True, False),
        (120, False, True),
    ],
    ids=[
        "ec2-spot-120-s-is-shorter-than-a-step-and-a-save",
        "one-second-short",
        "exactly-a-step-and-a-save-fits",
        "one-second-to-spare",
        "an-hour",
        "no-notice-field",
        "spot-without-a-save-interval",
    ],
)
@pytest.mark.parametrize("command", ["validate", "plan"])
def test_a_notice_shorter_than_a_step_plus_a_save_is_a_warning_naming_both_and_the_run_stays_valid(  # noqa: PLR0917
    command: str,
    notice: int | None,
    save_interval: bool,
    warned: bool,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    runtime = tmp_path / "runtime.yaml"
    runtime.write_text(yaml.safe_dump(_runtime(notice, save_interval=save_interval)))
    assert main([command, "-f", str(RUN_FILE), "--runtime", str(runtime)]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "interruptionNoticeSeconds" in line]
    if not warned:
        assert lines == [], out
        return
    assert len(lines) == 1, out
    line = lines[0]
    assert line.startswith("warning: spec.topology.instanceType: h100-ib (GRPORuntime h100-ib) "), line
    assert f"interruptionNoticeSeconds {notice}, shorter than" in line, line
    assert f"a rollout step ({STEP} s, spec.preemption.stepSeconds)" in line, line
    assert f"plus a checkpoint save ({SAVE} s, checkpoint / spec.storage.writeGBps) = {NEEDED} s" in line, line
    assert "cannot save before its node goes" in line, line
    if save_interval:
        assert "last periodic checkpoint (every 10 rollouts, spec.storage.saveInterval), losing" in line, line
    else:
        assert "with no spec.storage.saveInterval" in line, line


def test_the_warning_in_json_is_a_warning_of_the_instance_type_and_the_run_is_valid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runtime = tmp_path / "runtime.yaml"
    runtime.write_text(yaml.safe_dump(_runtime(120)))
    assert main(["validate", "-f", str(RUN_FILE), "--runtime", str(runtime), "-o", "json"]) == 0
    (row,) = yaml.safe_load(capsys.readouterr().out)
    found = [p for p in row["problems"] if "interruptionNoticeSeconds" in p["message"]]
    assert row["valid"] is True
    assert [(p["path"], p["severity"]) for p in found] == [("spec.topology.instanceType", "warning")]


def test_the_quickstarts_step_plus_save_is_longer_than_ec2_spots_notice() -> None:
    """The rows above rely on the quickstart's step and save exceeding 120 s (600 s and about 77 s)."""
    assert STEP == 600
    assert NEEDED > 120
