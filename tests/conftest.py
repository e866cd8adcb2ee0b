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


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist, group the tests by module, the machine-wide ones together and first (`--dist loadgroup
    --no-loadscope-reorder` keeps this order); a plain run keeps pytest's order."""
    if not getattr(config.option, "loadgroup", False):  # what xdist sets in its workers for --dist loadgroup
        return
    for item in items:
        group = MACHINE_GROUP if item.nodeid.startswith(ONE_PER_MACHINE) else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: not item.nodeid.startswith(ONE_PER_MACHINE))  # stable: each side keeps its order


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C reaches the children the tests stop with SIGINT, however the suite was started.

    A shell that starts a job in the background (`make test &`, nohup, some CI runners) leaves SIGINT ignored;
    an ignored signal stays ignored across exec, so every child would ignore the Ctrl-C that the teardown tests
    send (tests/integration/controlplane/test_controlplane_teardown.py, tests/integration/devtools/test_localray.py).
    Python's own handler here makes children start with the default disposition, as from a terminal.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
