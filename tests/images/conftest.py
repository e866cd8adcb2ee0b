"""Fixtures for the image tests: the images built from this tree, and containers run from them with podman.

`built_images` builds the operator and reward-service images once per session (`grpo_dev.images`, podman +
runc on the local Debian base; podman's layer cache makes an unchanged tree a matter of seconds). Without
podman or runc the session fails with one line saying how to install them: never a skip.

`run_container(pod_spec, container, ...)` starts a container the way a kubelet would start the given
Kubernetes container of a rendered pod spec: its image, command/args, env values, the read-only root
filesystem, an empty writable tmpfs for each emptyDir mount (and no other writable path: podman's own
tmpfs on /tmp, /run and /var/tmp under --read-only is turned off), dropped capabilities, no privilege
escalation, and the pod's runAsUser/runAsGroup. It uses the host network, so the test moves every port to a
free one on 127.0.0.1 before passing the arguments.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from grpo_dev.images import IMAGES, ImageError, build_all, podman


@pytest.fixture(scope="session")
def built_images() -> dict[str, str]:
    """name -> local image reference, built from the current tree."""
    problem = None
    try:
        build_all(install=False)
    except ImageError as exc:
        problem = str(exc)
    if problem:  # outside the except block: the one line, without the chained traceback
        pytest.fail(problem, pytrace=False)
    return {name: image.reference for name, image in IMAGES.items()}


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


@pytest.fixture
def run_container(built_images: dict[str, str]) -> Iterator[RunContainer]:
    started: list[Container] = []

    def run(
        pod_spec: dict[str, Any],
        container: dict[str, Any],
        *,
        command: Sequence[str] | None = None,
        args: Sequence[str] | None = None,
        env: dict[str, str] | None = None,
        volumes: Sequence[str] = (),
    ) -> Container:
        """`command`/`args` replace the container's (ports moved); `env` adds to or overrides its env."""
        name = f"grpo-test-{uuid.uuid4().hex[:10]}"
        command = list(command if command is not None else container.get("command", []))
        options = ["run", "--detach", "--name", name, "--network", "host", *kubelet_args(pod_spec, container)]
        options += [a for key, value in (env or {}).items() for a in ("--env", f"{key}={value}")]
        options += [a for volume in volumes for a in ("--volume", volume)]
        if command:
            options += ["--entrypoint", json.dumps(command)]
        argv = [*options, container["image"], *(args if args is not None else container.get("args", []))]
        handle = Container(name, argv)
        started.append(handle)
        podman(*argv)
        return handle

    yield run
    for handle in started:
        handle.remove()


def readable_copy(path: Path, into: Path) -> Path:
    """A copy of `path` the container's non-root user can read (bind mounts keep the host's mode)."""
    copy = into / path.name
    copy.write_bytes(path.read_bytes())
    copy.chmod(0o644)
    return copy
