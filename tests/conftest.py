"""Settings every tier shares: the hypothesis profiles, and Ctrl-C reaching the children tests stop.

Profiles: `ci`, loaded by default (`make unit`, `make integration`, `make test`), derandomizes hypothesis and
turns its example database off, so two runs in one checkout try the same inputs and a failure found once does
not replay only in the checkout that found it; `fuzz` (`make fuzz`, or `--hypothesis-profile=fuzz`) draws at
random, keeps the database under .hypothesis/ and tries ten times the examples (tests/support/fuzzing.py).
Nothing here imports a test helper: a hypothesis `settings` object made at import takes its defaults from the
profile loaded then, so helpers must be imported after the profile is chosen (at collection).

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


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C reaches the children the tests stop with SIGINT, however the suite was started.

    A shell that starts a job in the background (`make test &`, nohup, some CI runners) leaves SIGINT ignored;
    an ignored signal stays ignored across exec, so every child would ignore the Ctrl-C that the teardown tests
    send (tests/integration/controlplane/test_controlplane_teardown.py, tests/integration/devtools/test_localray.py).
    Python's own handler here makes children start with the default disposition, as from a terminal.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
