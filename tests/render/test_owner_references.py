"""Every child of a run names the run as its controlling owner and blocks the run's foreground deletion until it
is gone: `kubectl delete grpo --cascade=foreground` returns only once the GPUs are given back, and no other
controller can adopt the children."""

from __future__ import annotations

from tests.support.builders import example, rendered


def test_every_child_is_controlled_by_the_run_and_blocks_its_foreground_deletion() -> None:
    doc = example("quickstart", {"reward": {"type": "remote", "remote": {"replicas": 1}}})
    doc["metadata"]["uid"] = "0f3c9a52-1111-2222-3333-444455556666"
    children = rendered(doc).children
    assert {c["kind"] for c in children} >= {"RayCluster", "Deployment", "Service", "NetworkPolicy", "ConfigMap"}
    for child in children:
        (owner,) = child["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["controller"], owner["blockOwnerDeletion"]) == (
            "GRPORun",
            doc["metadata"]["name"],
            True,
            True,
        ), child["kind"]
