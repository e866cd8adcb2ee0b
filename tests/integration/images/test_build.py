"""Building the images: a broken Dockerfile line fails the build and says where; missing tools fail in one line.

The broken build uses a copy of each real Dockerfile with one line altered (a `COPY` of a path that is not in
the context), built from the repository root exactly as `make images` builds the real one; the unaltered
copy, built the same way, passes (from podman's layer cache), so only the altered line makes the difference.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from grpo_dev.images import IMAGES, ImageError, build, podman

pytestmark = pytest.mark.integration

# image -> (the Dockerfile line copying its sources, the same line with a wrong path)
BROKEN_COPY = {
    "operator": (
        "COPY operator/grpo_operator ./operator/grpo_operator",
        "COPY operator/grpo_operatr ./operator/grpo_operator",
    ),
    "reward-service": ("COPY reward_service/src ./src", "COPY reward_service/source ./src"),
}


@pytest.mark.parametrize("name", sorted(BROKEN_COPY))
@pytest.mark.parametrize("broken", [False, True], ids=["as-is", "wrong-copy-path"])
def test_a_wrong_copy_path_in_the_dockerfile_fails_the_build_naming_the_path(
    built_images: dict[str, str], tmp_path: Path, name: str, broken: bool
) -> None:
    image = IMAGES[name]
    line, wrong = BROKEN_COPY[name]
    text = image.dockerfile.read_text()
    assert text.count(line) == 1  # the line this test breaks is still in the real Dockerfile
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(text.replace(line, wrong) if broken else text)
    reference = f"localhost/grpo-build-test:{uuid.uuid4().hex[:8]}"
    try:
        if broken:
            with pytest.raises(ImageError) as failed:
                build(image, dockerfile=dockerfile, reference=reference)
            assert wrong.split()[1] in str(failed.value)  # the message names the missing path
            assert podman("image", "exists", reference, check=False).returncode != 0
        else:
            build(image, dockerfile=dockerfile, reference=reference)
            assert podman("image", "exists", reference, check=False).returncode == 0
    finally:
        podman("rmi", "--force", reference, check=False)


def test_without_podman_the_build_fails_in_one_line_saying_how_to_install_it(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "grpo_dev.images", "build", "--no-install"],
        env={"PATH": str(empty)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert "podman, runc, debootstrap not found" in line and "apt-get install" in line and "make images" in line
