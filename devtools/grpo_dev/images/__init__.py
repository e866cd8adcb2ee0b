"""The operator and reward-service images built and run locally with podman and runc (dev and tests only).

Public API: `IMAGES` (name -> `Image`, with its local `reference`), `DEV_IMAGES` and `build_dev` (the real-node
tests' dev layers), `build_all`, `build`, `podman`,
`podman_command`, `podman_env`, `ensure_tools`, `ImageError`. `python -m grpo_dev.images build` is the CLI
(`make images`).
"""

from __future__ import annotations

from grpo_dev.images.build import (
    BASE_IMAGE,
    DEV_IMAGES,
    IMAGES,
    INSTALL_HINT,
    Image,
    ImageError,
    build,
    build_all,
    build_dev,
    ensure_tools,
    podman,
    podman_command,
    podman_env,
)

__all__ = [
    "BASE_IMAGE",
    "DEV_IMAGES",
    "IMAGES",
    "INSTALL_HINT",
    "Image",
    "ImageError",
    "build",
    "build_all",
    "build_dev",
    "ensure_tools",
    "podman",
    "podman_command",
    "podman_env",
]
