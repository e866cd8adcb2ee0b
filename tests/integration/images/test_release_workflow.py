"""The release workflow (.github/workflows/release.yaml) cannot run here; what can be checked is checked.

It builds the three images from the Dockerfiles this repository has, scans each before pushing it, uses only
actions pinned by commit, and its pinning step, run here with bash on a copy of the chart and the examples,
writes the pushed digests where `helm template` and the examples pick them up.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.support.helm import by_kind, helm

REPO = Path(__file__).resolve().parents[3]
WORKFLOW = REPO / ".github" / "workflows" / "release.yaml"


def workflow() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(WORKFLOW.read_text())
    return loaded


def test_it_builds_the_three_images_from_their_dockerfiles() -> None:
    matrix = workflow()["jobs"]["images"]["strategy"]["matrix"]["include"]
    assert {m["name"] for m in matrix} == {"grpo-operator", "grpo-reward-service", "grpo-trainer"}
    for entry in matrix:
        assert (REPO / entry["file"]).is_file() and (REPO / entry["context"]).is_dir(), entry
    assert {m["file"] for m in matrix} == {str(p.relative_to(REPO)) for p in REPO.glob("*/Dockerfile")}


def test_every_image_is_scanned_before_it_is_pushed_and_every_action_is_pinned_by_commit() -> None:
    jobs = workflow()["jobs"]
    steps = jobs["images"]["steps"]
    uses = [s.get("uses", "") for s in steps]
    scan = next(i for i, u in enumerate(uses) if u.startswith("aquasecurity/trivy-action@"))
    push = next(i for i, s in enumerate(steps) if s.get("with", {}).get("push") is True)
    assert scan < push and steps[scan]["with"]["exit-code"] == "1"
    assert not any(s.get("with", {}).get("push") for s in steps[:scan])
    for job in jobs.values():
        for step in job["steps"]:
            if "uses" in step:
                assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", step["uses"]), step["uses"]


def test_the_pin_step_writes_the_digests_into_the_chart_and_the_examples(tmp_path: Path) -> None:
    [pin] = [s for s in workflow()["jobs"]["pin"]["steps"] if s.get("id") == "pin"]
    shutil.copytree(REPO / "charts", tmp_path / "charts")
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    pushed = {
        name: f"ghcr.io/example/{name}@sha256:{digit * 64}"
        for name, digit in (("grpo-operator", "a"), ("grpo-reward-service", "b"), ("grpo-trainer", "c"))
    }
    (tmp_path / "digests").mkdir()
    for name, ref in pushed.items():
        (tmp_path / "digests" / name).write_text(ref + "\n")
    subprocess.run(
        ["bash", "-c", pin["run"]], cwd=tmp_path, env={"PATH": "/usr/bin:/bin", **pin["env"]}, check=True, timeout=60
    )

    [deployment] = by_kind(helm("template", "grpo", str(tmp_path / "charts" / "grpo-operator")).stdout, "Deployment")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == pushed["grpo-operator"]
    assert {"name": "GRPO_REWARD_IMAGE", "value": pushed["grpo-reward-service"]} in container["env"]
    trainer_images, reward_images = set(), set()
    for example in (tmp_path / "examples").glob("*.yaml"):
        spec = yaml.safe_load(example.read_text())["spec"]
        trainer_images.add(spec["image"])
        if spec.get("reward", {}).get("remote", {}).get("image"):
            reward_images.add(spec["reward"]["remote"]["image"])
    assert trainer_images == {pushed["grpo-trainer"]}
    assert reward_images == {pushed["grpo-reward-service"]}
    # the comments of values.yaml survive (a YAML round trip would drop them)
    assert (tmp_path / "charts/grpo-operator/values.yaml").read_text().count("#") == (
        REPO / "charts/grpo-operator/values.yaml"
    ).read_text().count("#")
