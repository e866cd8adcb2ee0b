"""Fixtures for the operator tests: one real local Ray head per session.

`ray_head` is a started `grpo_dev.localray.LocalRayHead` (CPU only, every port on 127.0.0.1, the custom
resource `gpu_node: 1`); give `ray_head.dashboard_url` to `ray.job_submission.JobSubmissionClient`. It is
stopped, with every process it started, when the session ends.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from grpo_dev.localray import LocalRayHead


@pytest.fixture(scope="session")
def ray_head() -> Iterator[LocalRayHead]:
    with LocalRayHead() as head:
        yield head
