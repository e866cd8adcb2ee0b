"""Settings every tier shares: the hypothesis profiles, and Ctrl-C reaching the children tests stop.

Profiles: `ci`, loaded by default (`make unit`, `make integration`, `make test`), derandomizes hypothesis and
turns its example database off, so two runs in one checkout try the same inputs and a failure found once does
not replay only in the checkout that found it; `fuzz` (`make fuzz`, or `--hypothesis-profile=fuzz`) draws at
random, keeps the database under .hypothesis/ and tries ten times the examples (tests/support/fuzzing.py).
Nothing here imports a test helper: a hypothesis `settings` object made at import takes its defaults from the
profile loaded then, so helpers must be imported after the profile is chosen (at collection).

Under `pytest -n N` (`make test` runs two workers) each test module is one unit of work, so a module's fixtures
are made once, on one worker; the tests that share something the machine has only one of (the real kubelet node,
`make run`'s `.grpo/` folder) are one unit, sent first because it is the longest.

The fixtures that start real components (control plane, Ray head, uvicorn servers, podman images) live in the
conftest files under tests/integration/.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis.database import DirectoryBasedExampleDatabase

CI_EXAMPLES = 100

settings.register_profile("ci", derandomize=True, database=None, max_examples=CI_EXAMPLES, print_blob=True)
settings.register_profile(
    "fuzz",
    derandomize=False,
    database=DirectoryBasedExampleDatabase(Path(__file__).resolve().parents[1] / ".hypothesis" / "examples"),
    max_examples=10 * CI_EXAMPLES,
    print_blob=True,
)
settings.load_profile("ci")


# What the machine has one of: the real kubelet node (tests/e2e's package fixtures; the host-rules check runs after
# their teardown) and make run's .grpo/ (test_make_run*.py).
ONE_PER_MACHINE = ("tests/e2e/", "tests/integration/realnode/", "tests/integration/devtools/test_make_run.py")
MACHINE_GROUP = "one-per-machine"


def _unit_of_work(nodeid: str) -> str:
    return MACHINE_GROUP if nodeid.startswith(ONE_PER_MACHINE) else nodeid.split("::", maxsplit=1)[0]


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's scope scheduler with our units of work: a module, or the one-per-machine tests together. (Its
    `loadgroup` marks cannot serve: xdist 3.8 renames `item._nodeid`, which pytest 9 no longer reads.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ByUnitOfWork(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no types
        def _split_scope(self, nodeid: str) -> str:
            return _unit_of_work(nodeid)

    return ByUnitOfWork(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker, the one-per-machine tests first (the scheduler keeps the collection's order under
    `--no-loadscope-reorder`); a plain run keeps pytest's order."""
    if hasattr(config, "workerinput"):
        items.sort(key=lambda item: _unit_of_work(item.nodeid) != MACHINE_GROUP)  # stable: each side keeps its order


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C reaches the children the tests stop with SIGINT, however the suite was started.

    A shell that starts a job in the background (`make test &`, nohup, some CI runners) leaves SIGINT ignored;
    an ignored signal stays ignored across exec, so every child would ignore the Ctrl-C that the teardown tests
    send (tests/integration/controlplane/test_controlplane_teardown.py, tests/integration/devtools/test_localray.py).
    Python's own handler here makes children start with the default disposition, as from a terminal.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
