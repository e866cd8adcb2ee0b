"""Fixtures for the operator tests: one real local Ray head per session.

`ray_head` is a started `grpo_dev.localray.LocalRayHead` (CPU only, every port on 127.0.0.1, the custom
resource `gpu_node: 1`, token auth on with `harness.RAY_TOKEN`); use it with
`JobSubmissionClient(ray_head.dashboard_url, headers=ray_head.auth_headers)`. It is stopped, with every
process it started, when the session ends.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from grpo_dev.localray import LocalRayHead

from tests.operator.harness import RAY_TOKEN


@pytest.fixture(scope="session")
def ray_head() -> Iterator[LocalRayHead]:
    with LocalRayHead(auth_token=RAY_TOKEN) as head:
        yield head
