"""spec.recovery.provisioningTimeoutSeconds: a RayCluster with a pod that cannot be scheduled is not left holding the
GPUs its other pods were given. Past the limit (the spec's, else 30 minutes and one per GPU node of the plan) the
RayCluster is deleted: made again without the nodes the workers keep off when they keep off some (a pool of the
run's exact size has no other), else the run ends Failed/ProvisioningTimeout in the scheduler's words."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from grpo_operator.api.status import ConditionType, GRPORunStatus, Phase, Reason
from grpo_operator.cli.loading import parse_run
from grpo_operator.planning.plan import make_plan
from grpo_operator.status.decision import Decision, DeleteRayCluster, Submit
from grpo_operator.status.lifecycle import decide
from grpo_operator.status.observation import ClusterObservation, Seen

from tests.support.builders import base, merge
from tests.support.status import ECC, T0, WATCHDOG, WORKERS, cond, intent, running_then_failing, spec

R = Reason
RUN, _ = parse_run(merge(base(), {}))
assert RUN is not None
PLAN = make_plan(RUN).model_copy(update={"total_nodes": 4})  # the default limit: 1800 + 4 x 60 = 2040 s
# The cluster's message as edges/childstate.py pod_problems writes it, in the scheduler's words.
SCHEDULER = (
    "0/4 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 3 Insufficient nvidia.com/gpu."
    " preemption: 0/4 nodes are available: 1 Preemption is not helpful for scheduling, 3 No preemption victims found"
    " for incoming pod."
)
UNSCHEDULABLE = ClusterObservation(ready=False, message=f"pod x-ray-gpu-worker-abcde unschedulable: {SCHEDULER}")


def _waited(s: Any, since: datetime, seconds: int, prev: GRPORunStatus | None = None, **kw: Any) -> Decision:
    kw.setdefault("cluster", UNSCHEDULABLE)
    return decide(prev, Seen(unschedulable_since=since, **kw), intent(s, plan=PLAN), since + timedelta(seconds=seconds))


# (spec.recovery, seconds the pod has waited unschedulable, the run's phase and reason). Before, nothing bounded the
# wait: the pods that were scheduled held their GPUs for as long as the one that was not waited.
LIMITS = [
    pytest.param({}, 2039, (Phase.PROVISIONING, R.PROVISIONING), id="within the default sized from 4 GPU nodes"),
    pytest.param({}, 2040, (Phase.FAILED, R.PROVISIONING_TIMEOUT), id="at the default: 30 min + 1 min per GPU node"),
    pytest.param({"provisioningTimeoutSeconds": 600}, 599, (Phase.PROVISIONING, R.PROVISIONING), id="within 600 s"),
    pytest.param({"provisioningTimeoutSeconds": 600}, 600, (Phase.FAILED, R.PROVISIONING_TIMEOUT), id="at 600 s"),
    pytest.param(
        {"provisioningTimeoutSeconds": 0}, 7 * 86400, (Phase.PROVISIONING, R.PROVISIONING), id="0: without limit"
    ),
]


@pytest.mark.parametrize(("recovery", "seconds", "after"), LIMITS)
def test_a_pod_unschedulable_past_the_limit_ends_the_wait(
    recovery: dict[str, int], seconds: int, after: tuple[Phase, Reason]
) -> None:
    d = _waited(spec({"recovery": recovery}), T0, seconds)
    assert (d.status.phase, d.status.reason) == after
    assert d.has(DeleteRayCluster) is (after[0] is Phase.FAILED)


def test_the_timeout_gives_the_gpus_back_and_says_which_pod_could_not_be_scheduled_and_why() -> None:
    d = _waited(spec(), T0, 2100)
    assert d.status.message == (
        "a pod of the RayCluster was unschedulable for 2100 s (the default for its GPU nodes: 2040 s): the RayCluster"
        f" is deleted, giving back the GPUs its scheduled pods held: pod x-ray-gpu-worker-abcde unschedulable: {SCHEDULER}"
    )
    assert d.has(DeleteRayCluster) and not d.has(Submit)
    assert cond(d, ConditionType.COMPLETE) == ("True", R.PROVISIONING_TIMEOUT)
    assert d.warnings == [d.status.message]


def test_a_node_kept_off_that_the_pool_cannot_spare_is_let_back_then_a_pod_still_stuck_ends_the_run() -> None:
    s = spec({"recovery": {"maxRestarts": 1}})
    _, restarting = running_then_failing(s, f"{ECC}\n{WATCHDOG}", worker_nodes=WORKERS)
    assert restarting.status.avoided_nodes == ["node-c"] and restarting.status.restarts == 1
    remade = T0 + timedelta(seconds=40)  # the RayCluster made again without node-c: a worker has nowhere to go
    lifted = _waited(s, remade, 2040, restarting.status)
    assert (lifted.status.phase, lifted.status.reason) == (Phase.PROVISIONING, R.RESTARTING)
    assert lifted.status.avoided_nodes is None and lifted.status.restarts == 1  # not a failure of the run
    assert lifted.has(DeleteRayCluster)
    assert lifted.status.message is not None and lifted.status.message.startswith(
        "a pod of the RayCluster was unschedulable for 2040 s (the default for its GPU nodes: 2040 s) while the "
        "workers kept off node node-c: the RayCluster is made again without keeping off it, not counted against "
        "recovery.maxRestarts: pod x-ray-gpu-worker-abcde"
    )
    assert [e.reason for e in lifted.events if e.reason == R.RESTARTED] == [R.RESTARTED]
    # while the old RayCluster goes its pods are not judged (edges/childstate.py unschedulable_since says None)
    deleting = ClusterObservation(ready=False, message="the RayCluster is being deleted; it is made again next")
    going = decide(lifted.status, Seen(cluster=deleting), intent(s, plan=PLAN), remade + timedelta(seconds=2050))
    assert (going.status.phase, going.status.reason) == (Phase.PROVISIONING, R.PROVISIONING)
    # the new one cannot schedule either: nothing is kept off any more, so the run gives its GPUs back and ends
    again = remade + timedelta(seconds=2060)
    failed = _waited(s, again, 2040, going.status)
    assert (failed.status.phase, failed.status.reason) == (Phase.FAILED, R.PROVISIONING_TIMEOUT)
    assert failed.has(DeleteRayCluster)
