"""The worker pods' grace period (`terminationGracePeriodSeconds`): when a pod is preempted, drained or suspended,
its preStop hook asks miles for a checkpoint, which miles writes after the rollout step in flight, so the pod
needs a step's time (the observed p95, or the spec's figure before one is observed), the checkpoint's size over
the volume's write bandwidth, and a margin to exit after the hook gives up; capped by the spec, and by the
operator's own limit when it renders the pods."""

from __future__ import annotations

import math
from collections.abc import Sequence

from grpo_operator.api.spec import GRPORunSpec
from grpo_operator.api.status import PreemptionGrace, RunAccounting, StepTimeSource

GB_PER_GIB = 1.073741824
# The hook gives up this long before the grace ends, so it stops the pod's Ray (`ray stop`, 10 s of its own) and returns
# before the kubelet's SIGKILL.
MARGIN_SECONDS = 15


def p95(samples: Sequence[int]) -> int | None:
    """The nearest-rank 95th percentile of `samples`; None when there are none."""
    if not samples:
        return None
    ordered = sorted(samples)
    return ordered[math.ceil(0.95 * len(ordered)) - 1]


def observed_rollout_seconds(accounting: RunAccounting | None) -> tuple[int, ...]:
    """The rollout times of the last ended attempt that observed any: fixed while an attempt runs, so its pods'
    template does not change under it."""
    attempts = accounting.attempts if accounting is not None else []
    ended = [a.rollout_seconds for a in attempts if a.ended is not None and a.rollout_seconds]
    return tuple(ended[-1]) if ended else ()


def save_seconds(checkpoint_gib: float, write_gbps: float) -> int:
    return math.ceil(checkpoint_gib * GB_PER_GIB / write_gbps)


def preemption_grace(spec: GRPORunSpec, checkpoint_gib: float, rollout_seconds: Sequence[int]) -> PreemptionGrace:
    """The grace of a run whose recent rollouts took `rollout_seconds` each (none observed yet: the spec's)."""
    observed = p95(rollout_seconds)
    step = observed if observed is not None else spec.preemption.step_seconds
    save = save_seconds(checkpoint_gib, spec.storage.write_gbps)
    wanted = step + save + MARGIN_SECONDS
    return PreemptionGrace(
        step_seconds=step,
        step_source=StepTimeSource.SPEC if observed is None else StepTimeSource.OBSERVED,
        save_seconds=save,
        margin_seconds=MARGIN_SECONDS,
        wanted_seconds=wanted,
        seconds=min(wanted, spec.preemption.max_grace_seconds),
    )


def pod_grace_seconds(grace: PreemptionGrace, operator_max_seconds: int) -> int:
    """What a worker pod gets: the plan's grace, within the operator's limit."""
    return min(grace.seconds, operator_max_seconds)


def hook_wait_seconds(pod_grace: int) -> int:
    """How long the preStop hook waits for the save: the pod's grace less the margin to exit (at least 1 s)."""
    return max(1, pod_grace - MARGIN_SECONDS)
