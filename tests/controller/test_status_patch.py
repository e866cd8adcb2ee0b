"""The status patch the reconciler sends: applied as the API server applies a merge patch (RFC 7386), it leaves
exactly the status decided, nested mappings included; nothing is sent when nothing changed."""

from __future__ import annotations

import json

from grpo_operator.api.status import GRPORunStatus
from grpo_operator.controller.reconciler import status_patch
from grpo_operator.planning.instances import DEFAULT_RUNTIME
from grpo_operator.planning.runtime import record_of

from tests.support.fakekube import merge_patch

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
