"""The run's Ray auth token Secret: the head and workers read the token from it, the operator uses it to call the
Ray Jobs API. The token itself is made by the caller (randomness is not pure)."""

from __future__ import annotations

from typing import Any

from grpo_operator.render import names


def ray_auth_secret(namespace: str, run: str, uid: str | None, token: str) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": names.ray_auth_secret(run),
        "namespace": namespace,
        "labels": names.labels(run, "ray-auth"),
    }
    if uid:
        meta["ownerReferences"] = [names.owner_reference(run, uid)]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
        "type": "Opaque",
        "immutable": True,  # never rotated under a running cluster; delete the Secret to get a new token
        "stringData": {names.AUTH_TOKEN_KEY: token},
    }
