"""Fixtures for the reward service tests (the harness itself is in reward_harness.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.reward_harness import RewardServer, run_server


@pytest.fixture
def reward_server(tmp_path: Path) -> Iterator[Callable[..., contextlib.AbstractContextManager[RewardServer]]]:
    """Call with REWARD_* settings as keyword arguments (without the prefix), use as a context manager."""

    def start(**settings: str) -> contextlib.AbstractContextManager[RewardServer]:
        return run_server(tmp_path, **settings)

    yield start


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RewardServer]:
    """One default-configured server (2 workers) shared by the read-only tests of a module."""
    with run_server(tmp_path_factory.mktemp("reward"), workers="2") as server:
        yield server
