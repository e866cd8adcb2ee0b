"""A lint step: no function in the given packages is more complex than the limit (radon's cyclomatic complexity),
so each concern of the decision and the reconcile stays a function one can read whole. Prints each offender and
exits 1 when there is one."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from radon.complexity import cc_visit


def offenders(root: Path, limit: int) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        for block in cc_visit(path.read_text()):
            if block.complexity > limit:
                found.append(f"{path}:{block.lineno}: {block.fullname} has complexity {block.complexity} > {limit}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grpo_dev.complexity")
    parser.add_argument("packages", nargs="+", type=Path)
    parser.add_argument("--max", type=int, default=15, dest="limit")
    args = parser.parse_args(argv)
    found = [line for package in args.packages for line in offenders(package, args.limit)]
    print("\n".join(found) or f"no function above complexity {args.limit} in {', '.join(map(str, args.packages))}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
