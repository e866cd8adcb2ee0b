"""The worker pods' grace period: a rollout step (observed p95, else the spec's) + the checkpoint over the write
bandwidth + the hook's margin, capped by the spec and by the operator; shown in `grpo plan`, rendered on the pods."""

from __future__ import annotations

import io

import pytest
import yaml
from grpo_operator.api.status import AttemptAccount, RunAccounting, StepTimeSource
from grpo_operator.cli import check_text, cmd_plan
from grpo_operator.planning.grace import (
    MARGIN_SECONDS,
    hook_wait_seconds,
    observed_rollout_seconds,
    p95,
    pod_grace_seconds,
    preemption_grace,
)
from grpo_operator.planning.plan import make_plan
from grpo_operator.render import render
from grpo_operator.render.job import SAVE_SENTINEL

from tests.support.builders import SETTINGS, base, check, kind, merge, run_of, spec

# The seed's FSx measurement: a 4B model's 53 GB checkpoint in 72 s.
SEED_GB, SEED_SECONDS = 53, 72


@pytest.mark.parametrize(
    ("samples", "expected"),
    [
        ((), None),
        ((40,), 40),
        ((10, 30, 20), 30),
        (tuple(range(1, 21)), 19),  # nearest rank: ceil(0.95 * 20) = 19th of 20
        (tuple(range(1, 101)), 95),
    ],
    ids=["no samples", "one sample", "three samples", "twenty samples", "a hundred samples"],
)
def test_the_step_time_is_the_nearest_rank_p95_of_the_samples(samples: tuple[int, ...], expected: int | None) -> None:
    assert p95(samples) == expected


@pytest.mark.parametrize(
    ("patch", "samples", "step", "source", "save", "seconds"),
    [
        # before any rollout is observed: the spec's step time; 53 GB at the default 0.74 GB/s is 72 s
        ({}, (), 600, StepTimeSource.SPEC, 72, 600 + 72 + MARGIN_SECONDS),
        ({"preemption": {"stepSeconds": 120}}, (), 120, StepTimeSource.SPEC, 72, 120 + 72 + MARGIN_SECONDS),
        # observed rollouts replace the spec's figure
        ({}, (200, 300, 250), 300, StepTimeSource.OBSERVED, 72, 300 + 72 + MARGIN_SECONDS),
        # a faster volume: node-local NVMe, 53 GB in 8.3 s
        ({"storage": {"writeGBps": 6.4}}, (100,), 100, StepTimeSource.OBSERVED, 9, 100 + 9 + MARGIN_SECONDS),
        # the cap: a 2000 s step wants 2087 s, the spec allows 1800 by default
        ({}, (2000,), 2000, StepTimeSource.OBSERVED, 72, 1800),
        ({"preemption": {"maxGraceSeconds": 300}}, (), 600, StepTimeSource.SPEC, 72, 300),
    ],
    ids=[
        "the spec's step",
        "the spec's own step",
        "observed rollouts",
        "a faster volume",
        "capped at the default",
        "capped at the spec's cap",
    ],
)
def test_the_grace_is_a_step_plus_the_save_plus_a_margin_within_the_spec_cap(  # noqa: PLR0917
    patch: dict[str, object], samples: tuple[int, ...], step: int, source: StepTimeSource, save: int, seconds: int
) -> None:
    checkpoint_gib = SEED_GB / 1.073741824  # 53 GB
    grace = preemption_grace(spec(patch), checkpoint_gib, samples)
    assert (grace.step_seconds, grace.step_source, grace.save_seconds, grace.seconds) == (step, source, save, seconds)
    assert grace.wanted_seconds == step + save + MARGIN_SECONDS


def test_the_default_bandwidth_is_the_seeds_fsx_measurement() -> None:
    grace = preemption_grace(spec(), SEED_GB / 1.073741824, ())
    assert grace.save_seconds == SEED_SECONDS


@pytest.mark.parametrize(("operator_max", "expected"), [(3600, 687), (600, 600), (687, 687)])
def test_the_operator_limit_caps_what_the_pods_get(operator_max: int, expected: int) -> None:
    grace = preemption_grace(spec(), SEED_GB / 1.073741824, ())
    assert grace.seconds == 687
    assert pod_grace_seconds(grace, operator_max) == expected


@pytest.mark.parametrize(("pod_grace", "wait"), [(687, 687 - MARGIN_SECONDS), (MARGIN_SECONDS, 1), (5, 1)])
def test_the_hook_gives_up_a_margin_before_the_grace_ends(pod_grace: int, wait: int) -> None:
    assert hook_wait_seconds(pod_grace) == wait


def _attempt(n: int, ended: bool, samples: list[int]) -> AttemptAccount:
    return AttemptAccount(
        attempt=n,
        started="2026-01-01T00:00:00Z",
        ended="2026-01-01T01:00:00Z" if ended else None,
        rollout_seconds=samples,
    )


# The attempts as (number, ended, samples), made into AttemptAccounts inside the test: objects made while the
# module is collected would be of the classes as they were then (`make mutation` executes a mutated api module
# again, and a strict model refuses an instance of the class it replaced).
@pytest.mark.parametrize(
    ("attempts", "expected"),
    [
        ([], ()),
        ([(1, False, [50, 60])], ()),  # the running attempt's own samples do not move its pods' grace
        ([(1, True, [50, 60]), (2, False, [90])], (50, 60)),
        ([(1, True, [50]), (2, True, []), (3, False, [])], (50,)),
        ([(1, True, [50]), (2, True, [70, 80])], (70, 80)),
    ],
    ids=[
        "no attempt",
        "the running attempt only",
        "the ended attempt before the running one",
        "an ended attempt without samples is skipped",
        "the later of two ended attempts",
    ],
)
def test_the_observed_step_time_is_the_last_ended_attempts(
    attempts: list[tuple[int, bool, list[int]]], expected: tuple[int, ...]
) -> None:
    accounting = RunAccounting(updated_at="2026-01-01T01:00:00Z", attempts=[_attempt(*a) for a in attempts])
    assert observed_rollout_seconds(accounting) == expected


def test_the_worker_pods_get_the_plans_grace_within_the_operators_limit() -> None:
    run = run_of(base())
    plan = make_plan(run, (400,))
    workers = kind(render(run, plan, SETTINGS), "RayCluster")["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert workers["terminationGracePeriodSeconds"] == plan.preemption_grace.seconds == 400 + 77 + MARGIN_SECONDS
    low = SETTINGS.model_copy(update={"max_grace_seconds": 120})
    workers = kind(render(run, plan, low), "RayCluster")["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert workers["terminationGracePeriodSeconds"] == 120


def test_grpo_plan_shows_the_grace_and_what_it_is_made_of() -> None:
    doc = merge(base(), {"spec": {"preemption": {"maxGraceSeconds": 300}}})
    checked, _ = check_text(yaml.safe_dump(doc))
    out = io.StringIO()
    assert cmd_plan(checked, "table", out) == 0
    line = next(x for x in out.getvalue().splitlines() if x.startswith("preemption grace"))
    assert "300 s = rollout step 600 s (spec.preemption.stepSeconds)" in line
    assert "+ save 77 s" in line  # the example's 4.02 B parameters x 14 bytes: 56 GB at 0.74 GB/s
    assert "capped by spec.preemption.maxGraceSeconds (wanted 692 s)" in line


def test_every_worker_asks_miles_for_a_checkpoint_before_it_goes_and_gives_up_before_the_grace_ends() -> None:
    run = run_of(base())
    plan = make_plan(run)
    cluster = kind(render(run, plan, SETTINGS), "RayCluster")["spec"]
    worker = cluster["workerGroupSpecs"][0]["template"]["spec"]
    hook = worker["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
    assert hook[:4] == [SETTINGS.python, "-m", "grpo_launcher", "presave"]
    # then the pod's Ray stops: `ray start --block` under bash ignores the SIGTERM that follows the hook
    assert hook[-1] == "--stop-ray"
    args = dict(zip(hook[4:-1:2], hook[5:-1:2], strict=True))
    assert args["--sentinel"] == f"{plan.checkpoint_dir}/{SAVE_SENTINEL}"
    assert args["--checkpoint-dir"] == plan.checkpoint_dir
    assert int(args["--wait-seconds"]) == worker["terminationGracePeriodSeconds"] - MARGIN_SECONDS
    # the miles argv the job runs with names the same sentinel and checkpoint directory
    argv = list(render(run, plan, SETTINGS).job.miles_argv)
    assert argv[argv.index("--save-trigger-sentinel") + 1] == args["--sentinel"]
    assert argv[argv.index("--save") + 1] == args["--checkpoint-dir"]
    # The head holds GCS, without which every Ray process on the workers exits: it runs the same hook, marked as the
    # head's, with the workers' grace, and mounts the shared volume the sentinel and the marker are on.
    head = cluster["headGroupSpec"]["template"]["spec"]
    assert head["containers"][0]["lifecycle"]["preStop"]["exec"]["command"] == [*hook, "--head"]
    assert head["terminationGracePeriodSeconds"] == worker["terminationGracePeriodSeconds"]
    shared = {m["name"]: m["mountPath"] for m in head["containers"][0]["volumeMounts"]}["shared"]
    assert plan.checkpoint_dir.startswith(shared + "/")
    assert {v["name"]: v for v in head["volumes"]}["shared"] == {v["name"]: v for v in worker["volumes"]}["shared"]


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"storage": {"writeGBps": 1e-300}}, "spec.storage.writeGBps"),
        ({"preemption": {"maxGraceSeconds": 5}}, "spec.preemption.maxGraceSeconds"),
        ({"preemption": {"stepSeconds": 0}}, "spec.preemption.stepSeconds"),
    ],
    ids=["writeGBps near zero", "maxGraceSeconds 5", "stepSeconds 0"],
)
def test_a_grace_input_out_of_bounds_is_refused_naming_the_field(patch: dict[str, object], field: str) -> None:
    run, problems = check(merge(base(), {"spec": patch}))
    assert run is None
    assert any(field in str(p) for p in problems), [str(p) for p in problems]
