"""`python -m grpo_operator`: run the operator (kopf) against the current kubeconfig or in-cluster config.

Arguments are kopf's (`--namespace`, `--all-namespaces`, `--liveness`, `--standalone`, ...).
"""

from __future__ import annotations

import sys

import kopf.cli


def main() -> None:
    args = sys.argv[1:] or ["--all-namespaces"]
    sys.exit(kopf.cli.main(["run", "-m", "grpo_operator.controller.handlers", *args], standalone_mode=True))


if __name__ == "__main__":
    main()
