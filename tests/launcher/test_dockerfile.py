"""The trainer Dockerfile keeps the guards the seed image lacked, and its recorded versions match the code.

docker build cannot run on this machine; hadolint (make lint) checks the syntax and these tests check the
promises a reader relies on. They fail when someone re-adds a masked command or lets a version drift.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import grpo_launcher

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "trainer_image" / "Dockerfile").read_text()
INSTRUCTIONS = "\n".join(line for line in DOCKERFILE.splitlines() if not line.lstrip().startswith("#"))


def _arg(name: str) -> str:
    match = re.search(rf"^ARG {name}=(.*)$", DOCKERFILE, re.MULTILINE)
    assert match, f"ARG {name} has no default"
    return match.group(1).strip('"')


def test_the_base_is_pinned_by_a_sha256_digest() -> None:
    assert re.search(r"^FROM \$\{MILES_BASE_IMAGE\}@\$\{MILES_BASE_DIGEST\}$", DOCKERFILE, re.MULTILINE)
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", _arg("MILES_BASE_DIGEST"))


def test_no_command_is_masked_and_the_efa_installer_verifies_what_it_can() -> None:
    assert "|| true" not in INSTRUCTIONS
    assert "--no-verify" not in INSTRUCTIONS
    assert 'SHELL ["/bin/bash", "-euo", "pipefail", "-c"]' in DOCKERFILE


def test_the_cuda_compat_driver_is_removed_and_its_absence_asserted() -> None:
    assert "rm -rf /usr/local/cuda/compat /usr/local/cuda-*/compat" in INSTRUCTIONS
    assert 'for dir in /usr/local/cuda*/compat; do test ! -e "${dir}"; done' in INSTRUCTIONS


def test_downloads_are_checked_and_installed_artifacts_asserted() -> None:
    assert "sha256sum --check --strict" in INSTRUCTIONS
    assert 'test "$(git -C /tmp/gdrcopy rev-parse HEAD)" = "${GDRCOPY_COMMIT}"' in INSTRUCTIONS
    assert re.fullmatch(r"[0-9a-f]{40}", _arg("GDRCOPY_COMMIT"))
    for artifact in (
        "/opt/amazon/efa_installed_packages",
        "/opt/amazon/efa/bin/fi_info",
        "/opt/amazon/efa/lib/libfabric.so.1",
        "/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so",
        "/opt/gdrcopy/lib/libgdrapi.so.2",
    ):
        assert artifact in INSTRUCTIONS


def test_the_image_runs_as_a_non_root_user() -> None:
    user = re.findall(r"^USER (.+)$", DOCKERFILE, re.MULTILINE)
    assert user == ["${TRAINER_UID}:${TRAINER_UID}"]
    assert int(_arg("TRAINER_UID")) != 0


def test_recorded_versions_match_the_launcher_package() -> None:
    pyproject = tomllib.loads((ROOT / "trainer_image" / "pyproject.toml").read_text())
    assert _arg("LAUNCHER_VERSION") == grpo_launcher.__version__ == pyproject["project"]["version"]
    evaluate_extra = pyproject["project"]["optional-dependencies"]["evaluate"]
    assert f"math-verify[antlr4_13_2]=={_arg('MATH_VERIFY_VERSION')}" in evaluate_extra
    for label in ("dev.grpo.efa-installer.version", "dev.grpo.gdrcopy.version", "org.opencontainers.image.base.digest"):
        assert label in DOCKERFILE


def test_the_image_environment_feeds_the_provenance_line() -> None:
    for variable in ("GRPO_MILES_BASE", "GRPO_EFA_INSTALLER_VERSION", "GRPO_GDRCOPY_VERSION"):
        assert f"{variable}=" in INSTRUCTIONS


def test_both_ray_images_install_the_stacks_hook_and_the_build_asserts_it_registers() -> None:
    node = "\n".join(
        line
        for line in (ROOT / "devtools" / "images" / "ray-node.Dockerfile").read_text().splitlines()
        if not line.lstrip().startswith("#")
    )
    for instructions, python in ((INSTRUCTIONS, "python3"), (node, "/opt/venv/bin/python")):
        install = instructions.index(f"{python} -m grpo_launcher.stackdump --install-pth")
        check = instructions.index(
            f"GRPO_STACKS_DIR=/tmp/grpo-stacks-check {python} -m grpo_launcher.stackdump --check"
        )
        assert install < check


def test_the_image_declares_its_miles_version_and_the_build_checks_the_base_holds_that_miles() -> None:
    """A platform picks the miles version by the base it builds on; the image says which (label and the launcher's
    provenance) and a base holding another miles checkout fails the build (docs/trainer-image.md)."""
    from grpo_dev.miles_flags import MILES_COMMIT

    assert _arg("MILES_VERSION") == "dec268f7"
    assert re.fullmatch(r"[0-9a-f]{40}", _arg("MILES_COMMIT")) and _arg("MILES_COMMIT").startswith(MILES_COMMIT)
    assert 'test "${head}" = "${MILES_COMMIT}"' in INSTRUCTIONS
    assert "GRPO_MILES_VERSION=${MILES_VERSION}" in INSTRUCTIONS
    assert 'dev.grpo.miles.version="${MILES_VERSION}"' in INSTRUCTIONS
