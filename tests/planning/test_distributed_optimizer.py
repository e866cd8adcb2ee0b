"""miles runs adam with the distributed optimizer whatever the flags say, so the operator never offers it off.

radixark/miles dec268f7 miles/backends/megatron_utils/arguments.py:15 sets `args.use_distributed_optimizer`
for adam after parsing; a spec switch that turned it "off" planned an unsharded optimizer miles never used.
"""

from __future__ import annotations

from grpo_operator.planning.plan import make_plan
from grpo_operator.render import RenderSettings
from grpo_operator.render.job import miles_argv

from tests.support.builders import base, check, merge


def test_a_spec_that_turns_the_distributed_optimizer_off_is_refused_with_the_reason() -> None:
    run, problems = check(merge(base(), {"spec": {"training": {"distributedOptimizer": False}}}))
    assert run is None
    assert problems[0].path == "spec.training"
    assert "distributedOptimizer was removed" in problems[0].message
    assert "miles/backends/megatron_utils/arguments.py:15" in problems[0].message


def test_the_optimizer_state_is_sharded_over_data_parallelism_in_every_plan() -> None:
    one, _ = check(merge(base(), {"spec": {"topology": {"actor": {"nodes": 1}}}}))
    two, _ = check(merge(base(), {"spec": {"topology": {"actor": {"nodes": 2}}}}))
    assert one is not None and two is not None
    p1, p2 = make_plan(one), make_plan(two)
    assert p2.data_parallel == 2 * p1.data_parallel
    assert p2.actor_memory.optimizer_gib == round(p1.actor_memory.optimizer_gib / 2, 1)
    assert p2.actor_memory.grads_gib == p1.actor_memory.grads_gib  # the grad buffer is not sharded
    assert p1.distributed_optimizer and p2.distributed_optimizer


def test_the_argv_always_asks_for_the_distributed_optimizer_and_extra_args_may_not_repeat_it() -> None:
    run, _ = check(base())
    assert run is not None
    assert "--use-distributed-optimizer" in miles_argv(run, make_plan(run), RenderSettings())
    _, problems = check(merge(base(), {"spec": {"extraArgs": ["--use-distributed-optimizer"]}}))
    refused = [p for p in problems if p.path == "spec.extraArgs[0]"]
    assert refused and "fixed by the operator" in refused[0].message
    assert "arguments.py:15" in refused[0].message
