"""The status patch the reconciler sends: applied as the API server applies a merge patch (RFC 7386), it leaves
exactly the status decided, nested mappings included; nothing is sent when nothing changed."""

from __future__ import annotations

import dataclasses
import json

from grpo_operator.api.status import GRPORunStatus, GuardMemory, Phase, Reason
from grpo_operator.controller.reconciler import previous_status, status_patch
from grpo_operator.planning.instances import DEFAULT_RUNTIME
from grpo_operator.planning.runtime import record_of
from grpo_operator.status.lifecycle import decide
from grpo_operator.status.observation import JobState, Seen

from tests.support.fakekube import merge_patch
from tests.support.status import READY, SID, T0, healthy, intent, job

RECORD = record_of(DEFAULT_RUNTIME)
NEW = GRPORunStatus(observed_generation=2, message="creating the RayCluster", runtime=RECORD)


def _stored(status: GRPORunStatus) -> dict[str, object]:
    return merge_patch({}, json.loads(status.model_dump_json(by_alias=True)))


def test_a_patch_removes_keys_a_nested_mapping_no_longer_has() -> None:
    old = _stored(NEW)
    old["runtime"]["spec"]["defaults"]["env"] = {"LD_PRELOAD": "/shared/x.so"}  # type: ignore[index]
    old["runtime"]["spec"]["defaults"]["rewardImage"] = "docker.io/x/reward:1"  # type: ignore[index]
    old["stale"] = "a key of no field"
    patch = status_patch(old, NEW)
    assert patch is not None
    assert merge_patch(old, patch) == _stored(NEW)


def test_nothing_is_sent_when_the_status_is_as_decided() -> None:
    assert status_patch(_stored(NEW), NEW) is None


# A running run's status as an operator before status.guards wrote it: the guards' memory in three flat keys.
FLAT = {
    "phase": "Running",
    "reason": "Running",
    "observedGeneration": 1,
    "jobSubmissionId": SID,
    "jobStatus": "RUNNING",
    "attempt": 1,
    "startTime": "2026-11-30T11:50:00Z",
    "attemptStartTime": "2026-11-30T11:50:00Z",
    "guardRollout": 4,
    "repetitionStreak": 1,
    "lastProgressTime": "2026-11-30T11:59:00Z",
}


def test_an_upgrade_reads_the_streak_an_earlier_operator_stored_flat_and_carries_it_on() -> None:
    prev = previous_status({"metadata": {"name": "x"}, "status": FLAT})
    assert prev is not None and prev.guards == GuardMemory(
        last_rollout=4, repetition_streak=1, last_progress_time="2026-11-30T11:59:00Z"
    )
    running = Seen(cluster=READY, job=job(JobState.RUNNING), metrics=healthy(4, repetition=0.9))
    same = decide(prev, running, intent(), T0)  # rollout 4 again: counted once, before the upgrade
    assert same.status.phase is Phase.RUNNING and same.status.guards == prev.guards
    tripped = decide(prev, dataclasses.replace(running, metrics=healthy(5, repetition=0.9)), intent(), T0)
    assert (tripped.status.phase, tripped.status.reason) == (Phase.FAILED, Reason.DEGENERATE_OUTPUT)


def test_the_first_write_after_an_upgrade_moves_the_flat_keys_into_status_guards() -> None:
    prev = previous_status({"metadata": {"name": "x"}, "status": FLAT})
    assert prev is not None
    patch = status_patch(FLAT, prev)
    assert patch is not None
    written = merge_patch(dict(FLAT), patch)
    assert not {"guardRollout", "repetitionStreak", "lastProgressTime"} & set(written)
    assert written["guards"] == {"lastRollout": 4, "repetitionStreak": 1, "lastProgressTime": "2026-11-30T11:59:00Z"}
