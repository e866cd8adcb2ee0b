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
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from grpo_dev.images import IMAGES, ImageError, build_all, podman

from tests.support.containers import Container, RunContainer, kubelet_args


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
