"""Command line: `python -m reward_service --host H --port P` (settings come from REWARD_* variables).

An invalid setting, or no writable temporary directory (a read-only root filesystem without a volume at
/tmp), stops the start with one line per problem on stderr (what, the value, the rule, the fix) and exit
status 2, before any worker or socket exists; no traceback reaches the user.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile

import uvicorn

from reward_service.app import create_app
from reward_service.settings import SettingsError, load_settings, unknown_variables

PROG = "python -m reward_service"


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--port {text!r} is not an integer") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"--port {port} must be between 1 and 65535")
    return port


def temp_dir_problem(directory: str | None = None) -> str | None:
    """Why the worker pool could not start here, or None: its forkserver needs a writable temp dir."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix="reward-service-check-", dir=directory))
    except OSError as error:
        where = directory or os.environ.get("TMPDIR") or "/tmp"
        return (
            f"no writable temporary directory ({where}: {error.strerror or error}); the worker pool's "
            "forkserver needs one for its socket: mount a writable volume (an emptyDir) at /tmp, or "
            "set TMPDIR to a writable directory"
        )
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="GRPO reward service (miles remote_rm contract). Settings: REWARD_* environment "
        "variables, listed in docs/reward-service.md.",
    )
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")  # noqa: S104
    parser.add_argument("--port", type=_port, default=8000, help="port to listen on (default 8000)")
    args = parser.parse_args(argv)

    try:
        settings = load_settings()
    except SettingsError as error:
        for line in str(error).splitlines():
            print(f"{PROG}: invalid setting: {line}", file=sys.stderr)
        return 2

    problem = temp_dir_problem()
    if problem:
        print(f"{PROG}: cannot start: {problem}", file=sys.stderr)
        return 2

    logging.basicConfig(
        level=settings.log_level.value.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for name in unknown_variables(os.environ):
        logging.getLogger("reward_service").warning(
            "ignoring %s: not a setting of this service (a typo, or a Kubernetes service-link variable)", name
        )

    uvicorn.run(
        create_app(settings),
        host=args.host,
        port=args.port,
        log_level=settings.log_level.value,
        access_log=settings.access_log,
        timeout_graceful_shutdown=max(5, int(settings.hard_deadline_s) + 5),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
