"""Building the operator and reward-service images here, with podman and runc, on a locally made base.

This module owns turning `operator/Dockerfile` and `reward_service/Dockerfile` into local images with no
manual step, for the suite (tests/integration/images/) and `make images`:

- the tools: podman, runc and debootstrap. Missing ones are installed with `apt-get` (Debian packages) when
  allowed and possible, else `ImageError` says in one line how to install them.
- the base: no registry is reachable from the build machine, so the Dockerfiles' pinned production base
  (python:3.11-slim by digest) cannot be pulled. Each Dockerfile takes its base as `ARG BASE`; here it is a
  Debian bookworm root filesystem made by `debootstrap --variant=minbase` with python3 and python3-venv
  (bookworm's python3 is 3.11, the production base's minor version), imported with `podman import`. The
  root filesystem tarball is cached in `<cache>/images/`, so the base is made once per machine.
- pip's index: pip in the build reaches an index the way pip on this machine does. Its settings
  (`pip config list`: index URLs, trusted hosts, timeout, CA bundle) are handed to the build as build
  secrets (`pipconf`, a pip.conf, and `pipca`, the CA bundle), which are mounted for single RUN steps and
  never written into a layer. A build without them (the release workflow) uses pip's defaults.
- the layers: podman's layer cache keeps every step, so a second build of an unchanged tree takes seconds.
  The Dockerfiles install dependencies (pinned by constraints.txt) before copying the sources, so an edit
  of the sources re-runs only the last, dependency-free install.

podman runs with `--runtime runc` and `CONTAINERS_CONF` set to this package's containers.conf (crun fails
on this machine's hybrid cgroups; podman's default ulimits cannot be set here).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from grpo_dev.aptget import apt_install
from grpo_dev.localcluster.build import locked
from grpo_dev.localcluster.versions import cache_root

Report = Callable[[str], None]

REPO = Path(__file__).resolve().parents[3]
CONTAINERS_CONF = Path(__file__).resolve().parent / "containers.conf"
TOOLS = {"podman": "podman", "runc": "runc", "debootstrap": "debootstrap"}  # executable: Debian package
INSTALL_HINT = "apt-get install -y --no-install-recommends podman runc debootstrap (as root), or run `make images`"

# The local base: Debian bookworm (python3 3.11, like python:3.11-slim) with what the Dockerfiles run:
# python3 -m venv (python3-venv, with ensurepip's bundled pip) and useradd (passwd, in minbase).
DEBIAN_SUITE = "bookworm"
DEBIAN_PACKAGES = ("python3", "python3-venv")
DEBIAN_MIRROR_ENV = "GRPO_DEBIAN_MIRROR"
DEFAULT_DEBIAN_MIRROR = "http://deb.debian.org/debian"
BASE_IMAGE = f"localhost/grpo-base:{DEBIAN_SUITE}-python3"
TAG = "dev"


@dataclass(frozen=True)
class Image:
    name: str
    dockerfile: Path  # built with the repository root as its context

    @property
    def reference(self) -> str:
        return f"localhost/{self.name}:{TAG}"


IMAGES = {
    "operator": Image("grpo-operator", REPO / "operator" / "Dockerfile"),
    "reward-service": Image("grpo-reward-service", REPO / "reward_service" / "Dockerfile"),
}

# Dev layers on a product image, for the real-node tests only: never shipped, not built by `make images`.
DEV_IMAGES = {
    "ray-node": Image("grpo-ray-node", REPO / "devtools" / "images" / "ray-node.Dockerfile"),
    # ray-node with the GPU played (devtools/images/gpu_standin/): the preflight passes on a node without one.
    "ray-node-gpu": Image("grpo-ray-node-gpu", REPO / "devtools" / "images" / "ray-node-gpu.Dockerfile"),
}
DEV_BASES = {"ray-node-gpu": "ray-node"}  # a dev layer built on another


class ImageError(RuntimeError):
    """An image could not be built or run; the message says which, why and what to do."""


@dataclass(frozen=True)
class Outcome:
    what: str
    action: str  # "cached", "imported", "made" or "built"
    seconds: float


def _quiet(_: str) -> None:
    return None


# --- podman --------------------------------------------------------------------------------------------


def podman_env() -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}


def podman_command(*args: str) -> list[str]:
    """argv of `podman` with this project's settings (runc; CONTAINERS_CONF goes in the environment)."""
    return ["podman", "--runtime", "runc", *args]


def podman(
    *args: str, check: bool = True, timeout: float = 600, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    ensure_tools(install=False)
    result = subprocess.run(
        podman_command(*args),
        env=podman_env(),
        capture_output=True,
        text=True,
        input=input,
        timeout=timeout,
        check=False,
    )
    if check and result.returncode != 0:
        raise ImageError(
            f"podman {' '.join(args[:2])} failed ({result.returncode}): {_tail(result.stderr or result.stdout)}"
        )
    return result


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def image_exists(reference: str) -> bool:
    return podman("image", "exists", reference, check=False).returncode == 0


# --- tools ---------------------------------------------------------------------------------------------


def missing_tools() -> list[str]:
    return [tool for tool in TOOLS if shutil.which(tool) is None]


def ensure_tools(install: bool, report: Report = _quiet) -> None:
    """podman, runc and debootstrap on PATH; with `install`, missing ones come from apt-get (root only)."""
    missing = missing_tools()
    if not missing:
        return
    if install and os.geteuid() == 0 and shutil.which("apt-get"):
        apt_install([TOOLS[tool] for tool in missing], report)
        missing = missing_tools()
    if missing:
        raise ImageError(
            f"{', '.join(missing)} not found (the image tests build and run images with podman and "
            f"runc): {INSTALL_HINT}"
        )


# --- the local base --------------------------------------------------------------------------------------


def base_tarball() -> Path:
    return cache_root() / "images" / f"debian-{DEBIAN_SUITE}-{'-'.join(DEBIAN_PACKAGES)}.tar"


def ensure_base(report: Report = _quiet) -> Outcome:
    """The local base image: in podman's storage already, imported from the cached tarball, or made."""
    started = time.monotonic()
    tarball = base_tarball()
    with locked(tarball.with_suffix(".lock")):
        if image_exists(BASE_IMAGE):
            return Outcome(BASE_IMAGE, "cached", time.monotonic() - started)
        action = "imported"
        if not tarball.is_file():
            action = "made"
            _debootstrap(tarball, report)
        report(f"importing {tarball} as {BASE_IMAGE}")
        podman(
            "import",
            "--change",
            'CMD ["/bin/bash"]',
            "--message",
            f"debootstrap {DEBIAN_SUITE} + {' '.join(DEBIAN_PACKAGES)}",
            str(tarball),
            BASE_IMAGE,
        )
    return Outcome(BASE_IMAGE, action, time.monotonic() - started)


def _debootstrap(tarball: Path, report: Report) -> None:
    mirror = os.environ.get(DEBIAN_MIRROR_ENV) or DEFAULT_DEBIAN_MIRROR
    report(f"debootstrap {DEBIAN_SUITE} from {mirror} (once; cached as {tarball})")
    tarball.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=tarball.parent, prefix="_rootfs-") as scratch:
        root = Path(scratch) / "rootfs"
        argv = [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(DEBIAN_PACKAGES)}",
            DEBIAN_SUITE,
            str(root),
            mirror,
        ]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
        if result.returncode != 0:
            raise ImageError(
                f"debootstrap {DEBIAN_SUITE} from {mirror} failed ({result.returncode}): "
                f"{_tail(result.stdout + result.stderr, 5)}; set {DEBIAN_MIRROR_ENV} to a reachable mirror"
            )
        # Downloaded packages and indexes are not part of the base (python:3.11-slim ships neither).
        for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for path in (root / leftover).glob("*"):
                if path.is_file():
                    path.unlink()
        partial = Path(scratch) / "rootfs.tar"
        subprocess.run(["tar", "-C", str(root), "--numeric-owner", "-cf", str(partial), "."], check=True, timeout=600)
        partial.replace(tarball)  # one rename: an interrupted run never leaves a tarball that looks complete


# --- pip's index, as build secrets --------------------------------------------------------------------

# pip settings that decide where packages come from and how pip talks to the index.
_PIP_KEYS = ("index-url", "extra-index-url", "trusted-host", "timeout", "default-timeout", "retries", "proxy")
BUILD_MOUNTS = "/run/secrets"  # where RUN --mount=type=secret puts its files


def pip_settings() -> tuple[dict[str, str], Path | None]:
    """What `pip config list` of this Python says about the index (env and files), and its CA bundle if set."""
    result = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60, check=False
    )
    settings: dict[str, str] = {}
    cert: Path | None = None
    for line in result.stdout.splitlines():
        match = re.fullmatch(r"[^.]*\.([a-z-]+)='(.*)'", line.strip())
        if not match:
            continue
        key, value = match.groups()
        if key == "cert":
            cert = Path(value)
        elif key in _PIP_KEYS:
            settings[key] = value
    return settings, (cert if cert and cert.is_file() else None)


def _pip_conf(settings: dict[str, str], cert: Path | None) -> str:
    lines = ["[global]", *(f"{key} = {value}" for key, value in sorted(settings.items()))]
    if cert:
        lines.append(f"cert = {BUILD_MOUNTS}/pipca")
    return "\n".join(lines) + "\n"


@contextmanager
def pip_secrets() -> Iterator[list[str]]:
    """`podman build` arguments handing this machine's pip settings to the build as secrets."""
    settings, cert = pip_settings()
    with tempfile.TemporaryDirectory(prefix="grpo-pip-") as scratch:
        conf = Path(scratch) / "pip.conf"
        conf.write_text(_pip_conf(settings, cert))
        conf.chmod(0o600)
        args = ["--secret", f"id=pipconf,src={conf}"]
        if cert:
            args += ["--secret", f"id=pipca,src={cert}"]
        yield args


# --- building --------------------------------------------------------------------------------------------


def build(
    image: Image,
    *,
    dockerfile: Path | None = None,
    context: Path = REPO,
    reference: str | None = None,
    build_args: Sequence[str] = (),
    report: Report = _quiet,
) -> Outcome:
    """`podman build` of `image` (or of another `dockerfile` in `context`) on the local base."""
    ensure_base(report)
    started = time.monotonic()
    reference = reference or image.reference
    report(f"building {reference}")
    with pip_secrets() as secrets:
        args = [
            "build",
            "--layers",
            "--network",
            "host",
            "-f",
            str(dockerfile or image.dockerfile),
            "--build-arg",
            f"BASE={BASE_IMAGE}",
            *(a for arg in build_args for a in ("--build-arg", arg)),
            *secrets,
            "-t",
            reference,
            str(context),
        ]
        result = podman(*args, check=False, timeout=3600)
    if result.returncode != 0:
        raise ImageError(
            f"podman build of {reference} failed ({result.returncode}):\n{_tail(result.stdout + result.stderr, 25)}"
        )
    return Outcome(reference, "built", time.monotonic() - started)


def build_all(install: bool = True, report: Report = _quiet) -> list[Outcome]:
    ensure_tools(install, report)
    outcomes = [ensure_base(report)]
    outcomes += [build(image, report=report) for image in IMAGES.values()]
    return outcomes


def build_dev(name: str, report: Report = _quiet) -> Outcome:
    """The dev layer `name` (and the dev layer it is built on) on the operator image this tree builds (build that
    first: `build_all`)."""
    base = DEV_BASES.get(name)
    if base is not None:
        build_dev(base, report)
    args = [f"OPERATOR_IMAGE={IMAGES['operator'].reference}"]
    if base is not None:
        args = [f"RAY_NODE_IMAGE={DEV_IMAGES[base].reference}"]
    return build(DEV_IMAGES[name], build_args=args, report=report)
