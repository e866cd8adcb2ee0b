"""Containers run with podman the way a kubelet runs a rendered pod's container (the `run_container` fixture
of tests/integration/images/conftest.py starts them): `kubelet_args` maps the pod's security context, emptyDir
mounts and env values to `podman run` options; `Container` is the handle a test holds."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_dev.images import podman


@dataclass
class Container:
    name: str
    argv: list[str]
    exit_code: int | None = None

    def logs(self) -> str:
        result = podman("logs", self.name, check=False)
        return result.stdout + result.stderr

    def running(self) -> bool:
        return bool(self.state().get("Running"))

    def state(self) -> dict[str, Any]:
        result = podman("inspect", "--format", "{{json .State}}", self.name, check=False)
        return json.loads(result.stdout) if result.returncode == 0 else {}

    def exec(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return podman("exec", self.name, *argv, check=False)

    def stop(self, grace_seconds: int) -> int:
        """SIGTERM, then SIGKILL after `grace_seconds` (what a kubelet does); the exit code."""
        if self.exit_code is None:
            podman("stop", "--time", str(grace_seconds), self.name, check=False, timeout=grace_seconds + 60)
            self.exit_code = int(self.state().get("ExitCode", -1))
        return self.exit_code

    def remove(self) -> None:
        podman("rm", "--force", "--time", "0", self.name, check=False)


def kubelet_args(pod_spec: dict[str, Any], container: dict[str, Any]) -> list[str]:
    """`podman run` options for `container` of `pod_spec`, as a kubelet would run it (see the module doc)."""
    context = {**pod_spec.get("securityContext", {}), **container.get("securityContext", {})}
    args: list[str] = []
    if context.get("readOnlyRootFilesystem"):
        args += ["--read-only", "--read-only-tmpfs=false"]
    if "runAsUser" in context:
        args += ["--user", f"{context['runAsUser']}:{context.get('runAsGroup', context['runAsUser'])}"]
    if "ALL" in context.get("capabilities", {}).get("drop", []):
        args.append("--cap-drop=all")
    if context.get("allowPrivilegeEscalation") is False:
        args += ["--security-opt", "no-new-privileges"]
    empty_dirs = {v["name"] for v in pod_spec.get("volumes", []) if "emptyDir" in v}
    for mount in container.get("volumeMounts", []):
        if mount["name"] in empty_dirs:
            args += ["--tmpfs", f"{mount['mountPath']}:rw,mode=1777"]
    for env in container.get("env", []):
        if "value" in env:
            args += ["--env", f"{env['name']}={env['value']}"]
    return args


RunContainer = Callable[..., Container]


def readable_copy(path: Path, into: Path) -> Path:
    """A copy of `path` the container's non-root user can read (bind mounts keep the host's mode)."""
    copy = into / path.name
    copy.write_bytes(path.read_bytes())
    copy.chmod(0o644)
    return copy
