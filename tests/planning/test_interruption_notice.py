"""`check` warns when an instance type's `interruptionNoticeSeconds` is shorter than the step the grace uses (the
observed p95 once rollouts were observed, else spec.preemption.stepSeconds) plus the checkpoint save; a warning
only: the run stays valid, and the reconciler acts on errors alone."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from grpo_operator.planning.documents import parse_run, parse_runtime
from grpo_operator.planning.validation import Severity, check

from tests.support.builders import EXAMPLES, merge

RUNTIMES = EXAMPLES / "runtimes"


def _notice_warnings(notice: int | None, rollout_seconds: tuple[int, ...], run_patch: dict[str, Any]) -> list[str]:
    runtime_doc = yaml.safe_load((RUNTIMES / "h100-infiniband.yaml").read_text())
    if notice is not None:
        runtime_doc["spec"]["instanceTypes"][0]["interruptionNoticeSeconds"] = notice
    runtime, problems = parse_runtime(runtime_doc)
    assert runtime is not None, problems
    doc = merge(yaml.safe_load((RUNTIMES / "quickstart.yaml").read_text()), {"spec": run_patch})
    run, problems = parse_run(doc, runtime)
    assert run is not None, problems
    checked = check(run, rollout_seconds)
    assert checked.valid, [str(p) for p in checked.problems]
    found = [p for p in checked.problems if "interruptionNoticeSeconds" in p.message]
    assert all(p.severity is Severity.WARNING and p.path == "spec.topology.instanceType" for p in found)
    return [p.message for p in found]


@pytest.mark.parametrize(
    ("notice", "rollout_seconds", "run_patch", "words"),
    [
        # no rollout observed: spec.preemption.stepSeconds, set short enough that step + save fits
        (120, (), {"preemption": {"stepSeconds": 30}}, None),
        (120, (), {"preemption": {"stepSeconds": 60}}, "a rollout step (60 s, spec.preemption.stepSeconds)"),
        # observed rollouts replace the spec's figure, as they do for the grace
        (120, (20, 30, 25), {}, None),
        (120, (100, 90), {}, "a rollout step (100 s, observed p95)"),
        # a faster volume shortens the save (52.4 GiB at 6.4 GB/s: 9 s)
        (120, (100,), {"storage": {"writeGBps": 6.4}}, None),
        (None, (5000,), {}, None),
    ],
    ids=[
        "spec-step-30-s-plus-save-fits-120",
        "spec-step-60-s-plus-save-does-not",
        "observed-30-s-fits",
        "observed-100-s-does-not",
        "fast-volume-fits",
        "no-notice-never-warns",
    ],
)
def test_the_step_the_grace_uses_plus_the_save_is_what_must_fit_in_the_notice(
    notice: int | None, rollout_seconds: tuple[int, ...], run_patch: dict[str, Any], words: str | None
) -> None:
    messages = _notice_warnings(notice, rollout_seconds, run_patch)
    if words is None:
        assert messages == []
    else:
        assert len(messages) == 1 and words in messages[0], messages
        assert f"interruptionNoticeSeconds {notice}," in messages[0]
