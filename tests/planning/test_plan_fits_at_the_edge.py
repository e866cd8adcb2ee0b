"""A plan fits when the memory it needs equals what the node type has: a GPU exactly as large as the actor's
estimated training peak, and an SGLang reservation that leaves exactly the workspace free (an 80 GiB GPU at
memFraction 0.85 leaves 12.0 GiB to the last bit). `grpo plan` shows fits: true and `grpo validate` accepts the
run; the smallest step past the edge is refused."""

from __future__ import annotations

import copy
import math
import re
from typing import Any

import pytest
from grpo_operator.planning.documents import parse_run, parse_runtime
from grpo_operator.planning.instances import DEFAULT_RUNTIME_DOCUMENT
from grpo_operator.planning.plan import plan_run
from grpo_operator.planning.validation import check, errors

from tests.support.builders import example


def disaggregated(gpu_gib: float | None = None, mem_fraction: float = 0.7) -> Any:
    """The disaggregated Qwen3-4B example, on p5en.48xlarge with `gpu_gib` of GPU memory when given."""
    runtime = None
    if gpu_gib is not None:
        doc = copy.deepcopy(DEFAULT_RUNTIME_DOCUMENT)
        [p5en] = [t for t in doc["spec"]["instanceTypes"] if t["name"] == "p5en.48xlarge"]
        p5en["gpuMemoryGiB"] = gpu_gib
        runtime, problems = parse_runtime(doc)
        assert runtime is not None, problems
    run, problems = parse_run(
        example("qwen3-4b-disaggregated", {"topology": {"rollout": {"memFraction": mem_fraction}}}), runtime
    )
    assert run is not None, problems
    return run


def test_a_gpu_exactly_as_large_as_the_actors_training_peak_fits_and_one_a_hair_smaller_does_not() -> None:
    peak = plan_run(disaggregated()).actor.total_gib
    exact = check(disaggregated(gpu_gib=peak))
    assert exact.plan is not None and exact.plan.gpu_gib == peak
    assert exact.plan.fits
    assert not errors(exact.problems), [str(p) for p in exact.problems]
    short = check(disaggregated(gpu_gib=math.nextafter(peak, 0)))
    assert short.plan is not None and not short.plan.fits
    assert any("training needs about" in p.message for p in errors(short.problems)), [str(p) for p in short.problems]


def test_an_sglang_reservation_that_leaves_exactly_the_workspace_free_fits_and_a_larger_one_does_not() -> None:
    exact = check(disaggregated(gpu_gib=80.0, mem_fraction=0.85))
    assert exact.plan is not None
    memory = exact.plan.rollout_memory
    assert (memory.free_gib, memory.needed_free_gib) == (12.0, 12.0)
    assert exact.plan.fits
    assert not errors(exact.problems), [str(p) for p in exact.problems]
    over = check(disaggregated(gpu_gib=80.0, mem_fraction=0.86))
    assert over.plan is not None and not over.plan.fits
    assert errors(over.problems)


@pytest.mark.parametrize("short_by", [0.04, 0.001, "one ulp"])
def test_a_gpu_a_little_short_of_the_training_peak_is_refused_with_numbers_that_show_the_shortfall(
    short_by: float | str,
) -> None:
    peak = plan_run(disaggregated()).actor.total_gib
    gpu = math.nextafter(peak, 0) if short_by == "one ulp" else peak - float(short_by)
    [message] = [p.message for p in errors(check(disaggregated(gpu_gib=gpu)).problems) if "training needs" in p.message]
    needed = re.search(r"training needs about ([\d.]+) GiB per GPU", message)
    given = re.search(r"\) gives ([\d.]+) GiB:", message)
    assert needed and given, message
    assert float(needed[1]) > float(given[1]), message
    if short_by == 0.04:  # a tenth of a GiB or more apart keeps the usual one decimal
        assert len(needed[1].split(".")[1]) <= 2, message


def test_an_sglang_reservation_a_little_too_large_is_refused_with_numbers_that_show_the_shortfall() -> None:
    # 0.15 x 79.99 GiB leaves 11.9985 GiB outside SGLang's reservation, 0.0015 short of the 12 GiB workspace
    [message] = [str(p) for p in errors(check(disaggregated(gpu_gib=79.99, mem_fraction=0.85)).problems)]
    assert "0.85 leaves 11.999 GiB per GPU outside SGLang's static reservation but 12.000 GiB is needed" in message
