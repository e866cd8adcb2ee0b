"""Command line: `python -m grpo_dev.images build [--no-install]` builds the operator and reward-service images.

It prints each step (base cached, imported or made; each image built, from podman's layer cache where the
tree did not change) with its time, then `podman images` of the results. Missing podman, runc or
debootstrap are installed with apt-get unless `--no-install` is given.
"""

from __future__ import annotations

import argparse
import sys
import time

from grpo_dev.images.build import BASE_IMAGE, IMAGES, ImageError, build_all, podman


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grpo_dev.images", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="build the operator and reward-service images with podman + runc")
    build.add_argument("--no-install", action="store_true", help="fail instead of installing missing tools")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        outcomes = build_all(install=not args.no_install, report=lambda line: print(line, flush=True))
    except ImageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for outcome in outcomes:
        print(f"{outcome.what:45} {outcome.action:9} {outcome.seconds:7.1f}s")
    print(f"done in {time.monotonic() - started:.1f}s")
    filters = [
        arg for ref in (BASE_IMAGE, *(i.reference for i in IMAGES.values())) for arg in ("--filter", f"reference={ref}")
    ]
    print(podman("images", *filters).stdout.rstrip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
