"""spec.secretEnv reaches the driver and the workers by secretKeyRef only: the whole render (every manifest, the
run config's JSON, the Ray job with its runtime env) names the Secret only inside a secretKeyRef and gives the
variable no value; and every variable the render sets itself is one planning/secretenv.py refuses as a name."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from grpo_operator.planning.documents import parse_run, parse_runtime
from grpo_operator.planning.plan import make_plan
from grpo_operator.planning.secretenv import rendered_env
from grpo_operator.render import Rendered, render

from tests.support.builders import EXAMPLES, SETTINGS, example, kind, merge, rendered

SECRET, KEY, VARIABLE = "wandb-canary-secret", "canary-api-key", "WANDB_API_KEY"
SECRET_ENV = [{"name": VARIABLE, "secretKeyRef": {"name": SECRET, "key": KEY}}]


def _walk(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Every (path, value) of a manifest tree; a string holding JSON (the run config) is walked as its tree."""
    if isinstance(node, str) and node.lstrip().startswith("{"):
        node = json.loads(node)
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _walk(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, (*path, i))
    else:
        yield path, node


def _everything(result: Rendered) -> dict[str, Any]:
    return {"children": result.children, "job": result.job.as_dict()}


def _pod_env(result: Rendered) -> dict[str, list[dict[str, Any]]]:
    """The env of every container of the RayCluster, by where it is."""
    spec = kind(result, "RayCluster")["spec"]
    groups = {"head": spec["headGroupSpec"], **{g["groupName"]: g for g in spec["workerGroupSpecs"]}}
    return {
        f"{group} {c['name']}": c.get("env", [])
        for group, g in groups.items()
        for c in [*g["template"]["spec"].get("initContainers", []), *g["template"]["spec"]["containers"]]
    }


def test_the_head_and_every_worker_container_get_the_variable_by_secret_key_ref_only() -> None:
    result = rendered(example("quickstart", {"secretEnv": SECRET_ENV}))
    envs = _pod_env(result)
    assert any(where.startswith("head") for where in envs) and len(envs) >= 3  # head, worker preflight, worker
    for where, env in envs.items():
        [entry] = [e for e in env if e["name"] == VARIABLE]
        assert entry == {"name": VARIABLE, "valueFrom": {"secretKeyRef": {"name": SECRET, "key": KEY}}}, where


def test_the_whole_render_names_the_secret_only_in_a_secret_key_ref_and_gives_the_variable_no_value() -> None:
    result = rendered(example("quickstart", {"secretEnv": SECRET_ENV}))
    found = list(_walk(_everything(result)))
    naming = [path for path, value in found if value in (SECRET, KEY)]
    assert naming, "the render names the Secret somewhere"
    for path in naming:
        # The pods' env (valueFrom.secretKeyRef) and the run config's copy of the spec (spec.secretEnv[i].secretKeyRef).
        assert path[-2] == "secretKeyRef" and path[-1] in ("name", "key"), path
    # The variable is a name beside a secretKeyRef, never a key with a value (a runtime env, the run config's env).
    for path, value in found:
        assert VARIABLE not in map(str, path), path
        if value == VARIABLE:
            assert path[-1] == "name", path
    text = json.dumps(_everything(result))
    assert text.count(SECRET) == text.count(KEY) > 0
    assert VARIABLE not in json.dumps(result.job.runtime_env)
    config = json.loads(kind(result, "ConfigMap")["data"]["run-config.json"])
    assert VARIABLE not in config["env"]


def test_a_run_without_secret_env_renders_none_of_its_variables() -> None:
    result = rendered(example("quickstart"))
    assert VARIABLE not in json.dumps(_everything(result))


RUNTIMES = EXAMPLES / "runtimes"


def _on_runtime(run_patch: dict[str, Any], runtime_patch: dict[str, Any]) -> tuple[Any, Rendered]:
    rt_doc = merge(yaml.safe_load((RUNTIMES / "h100-infiniband.yaml").read_text()), runtime_patch)
    runtime, problems = parse_runtime(rt_doc)
    assert runtime is not None, problems
    doc = merge(yaml.safe_load((RUNTIMES / "quickstart.yaml").read_text()), {"spec": run_patch})
    run, problems = parse_run(doc, runtime)
    assert run is not None, problems
    return run, render(run, make_plan(run), SETTINGS)


def test_the_runtimes_secret_env_reaches_the_pods_and_a_run_points_a_variable_at_its_own_secret() -> None:
    shared = {"name": "TRACKER_TOKEN", "secretKeyRef": {"name": "platform-tracker", "key": "token"}}
    runtime_patch = {
        "spec": {"defaults": {"secretEnv": [SECRET_ENV[0] | {"secretKeyRef": {"name": "p", "key": "k"}}, shared]}}
    }
    run, result = _on_runtime({"secretEnv": SECRET_ENV}, runtime_patch)
    assert [e.name for e in run.spec.secret_env] == [VARIABLE, "TRACKER_TOKEN"]
    head = _pod_env(result)["head ray-head"]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in head if "secretKeyRef" in e.get("valueFrom", {})}
    assert refs[VARIABLE] == {"name": SECRET, "key": KEY}  # the run's own, not the runtime's p/k
    assert refs["TRACKER_TOKEN"] == {"name": "platform-tracker", "key": "token"}


def _set_by_the_render(result: Rendered) -> set[str]:
    names = {e["name"] for env in _pod_env(result).values() for e in env}
    return names | set(result.job.runtime_env["env_vars"])


@pytest.mark.parametrize(
    ("run_patch", "runtime_patch"),
    [
        # Multi-node on InfiniBand: the fabric's env; the runtime's own env; the HF token; TP > 1.
        (
            {"hfTokenSecret": {"name": "hf"}, "topology": {"parallelism": {"tensor": 2}}},
            {"spec": {"defaults": {"env": {"PLATFORM_PROXY": "http://proxy:3128"}}}},
        ),
        # A remote reward: the reward deadline in the job's runtime env.
        (
            {
                "reward": {
                    "type": "remote",
                    "remote": {"image": "registry.example.com/ml/reward@sha256:" + "1" * 64},
                }
            },
            {},
        ),
    ],
    ids=["multi-node InfiniBand with the runtime's env and an HF token", "a remote reward"],
)
def test_every_variable_the_render_sets_is_one_a_secret_may_not_take(
    run_patch: dict[str, Any], runtime_patch: dict[str, Any]
) -> None:
    run, result = _on_runtime(run_patch, runtime_patch)
    owned = rendered_env(run.spec)
    assert _set_by_the_render(result) - set(owned) == set()
