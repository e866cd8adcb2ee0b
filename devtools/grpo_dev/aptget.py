"""Installing Debian packages the dev tooling needs (podman, containerd, ...) with apt-get, updating the package
lists once when the first try fails (a fresh machine has none)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterable


def apt_install(packages: Iterable[str], report: Callable[[str], None]) -> None:
    """Install `packages` without recommends; the caller checks afterwards what is still missing."""
    names = list(packages)
    report(f"installing {' '.join(names)} with apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    argv = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *names]
    if subprocess.run(argv, env=env, capture_output=True, check=False).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, check=False)
        subprocess.run(argv, env=env, capture_output=True, check=False)
