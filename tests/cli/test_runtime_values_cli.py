"""`grpo validate` on the runtime and run values that used to validate and break on the cluster (issue #46): exit 1
and one line naming the field, the value, the rule and the fix, never a traceback; and a file holding a GRPORuntime
beside the runs that name it, as `kubectl apply -f` takes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from grpo_operator.cli import main

from tests.support.builders import EXAMPLES, merge

RUNTIME = yaml.safe_load((EXAMPLES / "runtimes" / "h100-infiniband.yaml").read_text())
RUN = yaml.safe_load((EXAMPLES / "runtimes" / "quickstart.yaml").read_text())
FABRIC = RUNTIME["spec"]["instanceTypes"][0]


def _types(**fabric: Any) -> dict[str, Any]:
    return {"instanceTypes": [merge(FABRIC, {"fabric": fabric})]}


def _validate(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    code = main(["validate", *args])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    return code, [line for line in (captured.out + captured.err).splitlines() if line]


@pytest.mark.parametrize(
    ("runtime_patch", "run_patch", "expected"),
    [
        pytest.param(
            {"defaults": {"env": {"HF_TOKEN": "hf_x"}}},
            {"hfTokenSecret": {"name": "hf"}},
            ("spec.defaults.env.HF_TOKEN", ["HF_TOKEN is set by spec.hfTokenSecret", "remove it from the runtime"]),
            id="runtime-env-the-render-owns",
        ),
        pytest.param(
            {},
            {"scheduling": {"gpuNodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}}},
            (
                "spec.scheduling.gpuNodeSelector",
                ["NVIDIA-A100-SXM4-80GB conflicts with", "narrows its type's", "drop the key"],
            ),
            id="selector-replaces-the-types",
        ),
        pytest.param(
            _types(resourceName="nvidia.com/gpu"),
            {},
            (
                "spec.instanceTypes[0].fabric.resourceName",
                ["nvidia.com/gpu is a resource the render requests itself", "name the fabric device plugin's own"],
            ),
            id="fabric-resource-the-render-sets",
        ),
        pytest.param(
            {"defaults": {"scheduling": {"headResources": {"cpu": "2", "memory": "8"}}}},
            {},
            ("spec.defaults.scheduling.headResources.memory", ["8 is 8 bytes", "did you mean 8Gi?"]),
            id="memory-without-a-unit",
        ),
        pytest.param(
            {"locks": {"imagePrefixes": ["registry.example.com"]}},
            {"image": "registry.example.com.evil.io/x@sha256:" + "a" * 64},
            (
                "spec.image",
                ["registry.example.com.evil.io/x", "locks.imagePrefixes: registry.example.com", "use an image under"],
            ),
            id="image-prefix-past-a-boundary",
        ),
        pytest.param(
            {"defaults": {"storage": {"mountPath": "/usr"}}},
            {},
            ("spec.defaults.storage.mountPath", ["/usr is, lies under or holds /usr", "choose a directory of its own"]),
            id="runtime-mount-over-a-system-directory",
        ),
        pytest.param(
            {},
            {"storage": {"mountPath": "/etc/grpo/data"}},
            (
                "spec.storage.mountPath",
                ["/etc/grpo/data is, lies under or holds /etc/grpo", "choose a directory of its own"],
            ),
            id="run-mount-in-the-run-config-mount",
        ),
    ],
)
def test_a_value_that_would_break_on_the_cluster_is_one_line_and_exit_1(
    runtime_patch: dict[str, Any],
    run_patch: dict[str, Any],
    expected: tuple[str, list[str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    runtime, run = tmp_path / "runtime.yaml", tmp_path / "run.yaml"
    runtime.write_text(yaml.safe_dump(merge(RUNTIME, {"spec": runtime_patch})))
    run.write_text(yaml.safe_dump(merge(RUN, {"spec": run_patch})))
    code, lines = _validate(tmp_path, capsys, "-f", str(run), "--runtime", str(runtime))
    assert code == 1
    field, words = expected
    said = [line for line in lines if field + ":" in line]
    assert len(said) == 1, lines
    assert all(w in said[0] for w in words), said[0]


def _file(tmp_path: Path, *docs: dict[str, Any]) -> str:
    path = tmp_path / "all.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return str(path)


def test_a_file_with_a_runtime_and_a_run_naming_it_validates_the_run_against_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines = _validate(tmp_path, capsys, "-f", _file(tmp_path, RUNTIME, RUN))
    assert (code, lines) == (0, ["h100-ib: valid", "quickstart-ib: valid"])


def test_a_run_in_the_file_is_held_to_the_files_runtime(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = merge(RUN, {"spec": {"image": "docker.io/other/trainer@sha256:" + "a" * 64}})
    code, lines = _validate(tmp_path, capsys, "-f", _file(tmp_path, RUNTIME, run))
    assert code == 1
    assert len(lines) == 2 and lines[1] == "h100-ib: valid", lines
    assert lines[0].startswith("quickstart-ib: spec.image: docker.io/other/trainer@sha256:"), lines
    assert "locks.imagePrefixes: registry.example.com/ml/" in lines[0]


def test_a_run_naming_an_invalid_runtime_of_the_file_says_so_after_the_runtimes_own_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runtime = merge(RUNTIME, {"spec": {"defaults": {"env": {"RAY_AUTH_TOKEN": "t"}}}})
    code, lines = _validate(tmp_path, capsys, "-f", _file(tmp_path, runtime, RUN))
    assert code == 1
    assert [line.split(":")[0:2] for line in lines] == [
        ["h100-ib", " spec.defaults.env.RAY_AUTH_TOKEN"],
        ["quickstart-ib", " spec.runtimeRef.name"],
    ], lines
    assert lines[1].endswith(
        "the GRPORuntime of that name in this file (document 1) is invalid; fix its problems above"
    )


def test_render_of_a_file_with_a_runtime_prints_the_runs_children_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["render", "-f", _file(tmp_path, RUNTIME, RUN)]) == 0
    kinds = [d["kind"] for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    assert "GRPORuntime" not in kinds and "RayCluster" in kinds, kinds
