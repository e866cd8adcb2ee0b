"""An edit of a started run is resolved against its recorded copy and held to the live GRPORuntime's locks too: a
lock in either refuses, naming which object locks it; the live runtime's locks of fields no edit can change (the
API server refuses such edits) do not judge a run admitted before them."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from grpo_operator.planning.documents import parse_run, parse_runtime

from tests.support.builders import EXAMPLES, merge

RUNTIMES = EXAMPLES / "runtimes"
GUARDS = {"consecutiveRollouts": 3}
MINE = "registry.example.com/ml/mine:1"


def runtime(**locks_and_defaults: Any) -> Any:
    """The InfiniBand example without its own locked fields, patched."""
    doc = yaml.safe_load((RUNTIMES / "h100-infiniband.yaml").read_text())
    doc["spec"]["locks"]["fields"] = []
    parsed, problems = parse_runtime(merge(doc, {"spec": locks_and_defaults}))
    assert parsed is not None, problems
    return parsed


def run(**spec: Any) -> dict[str, Any]:
    doc = yaml.safe_load((RUNTIMES / "quickstart.yaml").read_text())
    doc["metadata"]["namespace"] = "team-a"
    return merge(doc, {"spec": spec})


OPEN = runtime()
GUARDS_LOCKED = runtime(locks={"fields": ["guards"]}, defaults={"guards": GUARDS})
IMAGE_LOCKED = runtime(locks={"fields": ["image"]})
# The locked default as the runtime holds it (every guard, filled in): what a run may set guards to.
FULL_GUARDS = GUARDS_LOCKED.spec.defaults.guards.model_dump(mode="json", by_alias=True, exclude_none=True)


EDITS = [
    ("no live runtime: the copy alone, as before", OPEN, None, {"guards": {"consecutiveRollouts": 5}}, None),
    ("a live lock of guards refuses an edit of them", OPEN, GUARDS_LOCKED, {"guards": {"consecutiveRollouts": 5}}, "live"),
    ("the copy's lock refuses whatever the live runtime says", GUARDS_LOCKED, OPEN, {"guards": {"consecutiveRollouts": 5}}, "copy"),
    ("both lock: the copy's refusal, once", GUARDS_LOCKED, GUARDS_LOCKED, {"guards": {"consecutiveRollouts": 5}}, "copy"),
    ("guards left out: nothing overrides the lock", OPEN, GUARDS_LOCKED, {}, None),
    ("guards equal to the live default: nothing overrides it", OPEN, GUARDS_LOCKED, {"guards": FULL_GUARDS}, None),
    ("a live lock of the image, which no edit can change, judges no edit", OPEN, IMAGE_LOCKED, {"image": MINE}, None),
]  # fmt: skip


@pytest.mark.parametrize(("case", "copy", "live", "spec", "refused"), EDITS, ids=[row[0] for row in EDITS])
def test_an_edit_is_refused_by_a_lock_of_the_copy_or_of_the_live_runtime(
    case: str, copy: Any, live: Any, spec: dict[str, Any], refused: str | None
) -> None:
    resolved, problems = parse_run(run(**spec), copy, live)
    if refused is None:
        assert resolved is not None and problems == [], (case, problems)
        return
    assert resolved is None, case
    [problem] = problems
    assert problem.path == "spec.guards", case
    for part in (
        "GRPORun team-a/quickstart-ib on GRPORuntime h100-ib",
        "locks.fields lists guards",
        "remove spec.guards",
    ):
        assert part in problem.message, (case, problem.message)
    assert ("in the live GRPORuntime" in problem.message) == (refused == "live"), (case, problem.message)
    assert "{'consecutiveRollouts': 5}" in problem.message, (case, problem.message)  # the value the run set


def test_the_live_runtime_lends_no_default_the_copy_does_not_have() -> None:
    """Only the live runtime's locks judge an edit: its defaults and node types stay the copy's."""
    live = runtime(defaults={"trainerImage": "registry.example.com/ml/live:2"})
    resolved, problems = parse_run(run(), OPEN, live)
    assert resolved is not None, problems
    assert resolved.spec.image == OPEN.spec.defaults.trainer_image
