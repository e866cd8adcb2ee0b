"""Every env entry a runtime or a run asks for reaches the Ray pods once, with its value, or the runtime is refused
when it is read (issue #46): no container of any render has two entries of one name (the API server's
server-side apply answers 500 to that), and no runtime value is dropped for one the render sets itself."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from grpo_operator.planning import documents
from grpo_operator.planning.plan import make_plan
from grpo_operator.render import render

from tests.support.builders import EXAMPLES, SETTINGS, merge, pod_specs, rendered, valid_examples

RUNTIME = yaml.safe_load((EXAMPLES / "runtimes" / "h100-infiniband.yaml").read_text())
RUN = yaml.safe_load((EXAMPLES / "runtimes" / "quickstart.yaml").read_text())


def _containers(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for pod in pods for c in pod.get("initContainers", []) + pod["containers"]]


def _twice(containers: list[dict[str, Any]]) -> list[tuple[str, str]]:
    out = []
    for container in containers:
        names = [e["name"] for e in container.get("env", [])]
        out += [(container["name"], n) for n in sorted(set(names)) if names.count(n) > 1]
    return out


@pytest.mark.parametrize("path", valid_examples(), ids=lambda p: p.stem)
def test_no_container_of_an_example_has_an_env_name_twice(path: Any) -> None:
    assert _twice(_containers(pod_specs(rendered(yaml.safe_load(path.read_text()))))) == []


@pytest.mark.parametrize(
    ("runtime_patch", "run_patch"),
    [
        pytest.param({"defaults": {"env": {"HF_TOKEN": "hf_x"}}}, {"hfTokenSecret": {"name": "hf"}}, id="hf-token"),
        pytest.param({"defaults": {"env": {"RAY_AUTH_TOKEN": "t"}}}, {}, id="ray-auth-token"),
        pytest.param({"defaults": {"env": {"PROMETHEUS_PORT": "1"}}}, {}, id="job-env"),
        pytest.param(
            {
                "instanceTypes": [
                    merge(RUNTIME["spec"]["instanceTypes"][0], {"fabric": {"env": {"MILES_HOST_IP": "x"}}})
                ]
            },
            {},
            id="fabric-miles-host-ip",
        ),
        pytest.param({"defaults": {"env": {"NCCL_DEBUG": "INFO", "PLATFORM": "a"}}}, {}, id="tuning-and-own-names"),
    ],
)
def test_a_runtimes_env_is_refused_or_reaches_every_ray_container_once_with_its_value(
    runtime_patch: dict[str, Any], run_patch: dict[str, Any]
) -> None:
    runtime, problems = documents.parse_runtime(merge(RUNTIME, {"spec": runtime_patch}))
    if runtime is None:
        assert problems and all("it is the operator's to set" in p.message for p in problems), problems
        return
    run, said = documents.parse_run(merge(RUN, {"spec": run_patch}), runtime)
    assert run is not None, said
    result = render(run, make_plan(run), SETTINGS)
    ray = [c for c in _containers(pod_specs(result)) if c["name"].startswith(("ray-", "preflight"))]
    assert ray and _twice(ray) == []
    wanted = dict(runtime.spec.defaults.env)
    for container in ray:
        worker = container["name"] != "ray-head"
        expected = wanted | (dict(runtime.spec.instance_types[0].fabric.env) if worker else {})
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert {k: env.get(k) for k in expected} == expected, container["name"]
