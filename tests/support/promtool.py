"""promtool (Prometheus's rule checker and rule unit-test runner), built once from the Go module proxy.

`promtool()` returns `$GRPO_PROMTOOL` when set, else `~/.cache/grpo-operator/promtool-<version>/promtool`,
building it on first use with `go install -tags remove_all_sd github.com/prometheus/prometheus/cmd/promtool@<version>`
(Prometheus's own build tag that leaves out the cloud service-discovery plugins, which rule checks and rule unit
tests never use and which are most of a cold build; a few minutes, once). The build goes to a scratch directory and is renamed into place, so an interrupted build
never leaves a half-written binary that looks complete.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

VERSION = "v0.316.0"  # github.com/prometheus/prometheus module version (Prometheus 3.x)
CACHE = Path(os.environ.get("GRPO_CACHE_DIR", Path.home() / ".cache" / "grpo-operator"))


class PromtoolUnavailable(RuntimeError):
    """promtool is not built and cannot be: no Go toolchain."""


def promtool() -> Path:
    override = os.environ.get("GRPO_PROMTOOL")
    if override:
        return Path(override)
    target = CACHE / f"promtool-{VERSION}" / "promtool"
    if target.is_file():
        return target
    go = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").is_file() else None)
    if go is None:
        raise PromtoolUnavailable("promtool is not built and no `go` is on PATH: install Go, or set GRPO_PROMTOOL")
    CACHE.mkdir(parents=True, exist_ok=True)
    for stale in CACHE.glob("_promtool-build-*"):  # left by a build that was killed
        shutil.rmtree(stale, ignore_errors=True)
    scratch = Path(tempfile.mkdtemp(prefix="_promtool-build-", dir=CACHE))
    try:
        subprocess.run(
            [go, "install", "-tags", "remove_all_sd", f"github.com/prometheus/prometheus/cmd/promtool@{VERSION}"],
            env={**os.environ, "GOBIN": str(scratch / "bin"), "CGO_ENABLED": "0"},
            check=True,
            capture_output=True,
            timeout=3600,
        )
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(scratch / "bin" / "promtool", target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def check_rules(tool: Path, rules: dict[str, Any], directory: Path) -> subprocess.CompletedProcess[str]:
    """`promtool check rules` on `rules` (a rule file's content), written into `directory`."""
    (directory / "rules.yaml").write_text(yaml.safe_dump(rules))
    return subprocess.run(
        [str(tool), "check", "rules", "rules.yaml"],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
