"""The reward-service image, run for real under podman + runc the way the operator's rendered Deployment
asks (read-only root, /tmp an emptyDir, capabilities dropped, the image's non-root user), answers like the
source tree and stops cleanly on SIGTERM.

The pod spec comes from the operator's own rendering (grpo_operator.render.reward) of
examples/qwen3-4b-disaggregated.yaml with the built image; the source tree's service
(`python -m reward_service` from this checkout, tests/support/reward_harness.py) gets the same REWARD_*
settings and the same requests, and the two must agree.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from grpo_dev.images import podman
from grpo_operator.planning.plan import make_plan
from grpo_operator.render import RenderSettings, render
from prometheus_client.parser import text_string_to_metric_families

from tests.support.builders import example, run_of
from tests.support.containers import Container, RunContainer
from tests.support.operator_harness import free_port, wait_for
from tests.support.reward_harness import RewardServer, run_server

pytestmark = pytest.mark.integration

# Each request is sent to both services; status and body must match.
REQUESTS: list[tuple[str, Any]] = [
    ("/score", {"prompt": "p", "response": "so the answer is $\\boxed{42}$", "label": "42"}),
    ("/score", {"prompt": "p", "response": "$\\boxed{41}$", "label": 42}),
    ("/score", {"prompt": "p", "response": "no box at all", "label": "42"}),
    ("/score", {"prompt": "p", "response": "$\\boxed{\\frac{1}{2}}$", "label": "0.5"}),
    ("/score", {"prompt": "p", "response": "x", "label": None}),  # a 422 naming the field
    ("/score/batch", [{"prompt": "p", "response": f"$\\boxed{{{i}}}$", "label": 2} for i in range(4)]),
]


def reward_pod(image: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The pod spec and reward container the operator renders for a remote-reward run using `image`."""
    run = run_of(example("qwen3-4b-disaggregated", {"reward": {"remote": {"image": image}}}))
    result = render(run, make_plan(run), RenderSettings())
    deployment = next(c for c in result.children if c["kind"] == "Deployment")
    pod: dict[str, Any] = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    return pod, container


@pytest.fixture
def reward(
    built_images: dict[str, str], run_container: RunContainer
) -> Iterator[tuple[Container, str, dict[str, Any]]]:
    """The container as rendered, every port moved to a free one on loopback; its URL and rendered container."""
    pod, container = reward_pod(built_images["reward-service"])
    [port] = [p["containerPort"] for p in container["ports"]]
    moved = free_port()
    command = [{"0.0.0.0": "127.0.0.1", str(port): str(moved)}.get(arg, arg) for arg in container["command"]]
    handle = run_container(pod, container, command=command)
    url = f"http://127.0.0.1:{moved}"
    startup = container["startupProbe"]["httpGet"]["path"]
    wait_for("the container's startup probe", lambda: _get(url + startup) == 200 or _exited(handle), timeout=120)
    assert handle.running(), handle.logs()
    yield handle, url, container


def _get(url: str) -> int | None:
    try:
        return httpx.get(url, timeout=5).status_code
    except httpx.HTTPError:
        return None


def _exited(handle: Container) -> bool:
    return not handle.running()


@pytest.fixture
def source_tree(reward: tuple[Container, str, dict[str, Any]], tmp_path: Path) -> Iterator[RewardServer]:
    """The source tree's service with the container's REWARD_* settings."""
    _, _, container = reward
    settings = {
        e["name"].removeprefix("REWARD_").lower(): e["value"]
        for e in container["env"]
        if e["name"].startswith("REWARD_")
    }
    with run_server(tmp_path, **settings) as server:
        yield server


def test_the_image_runs_read_only_as_its_non_root_user_with_only_tmp_writable(
    reward: tuple[Container, str, dict[str, Any]], built_images: dict[str, str]
) -> None:
    handle, _, _ = reward
    user = podman("image", "inspect", "--format", "{{.Config.User}}", built_images["reward-service"]).stdout.strip()
    assert user == "10001:10001"  # numeric and not root: what the rendered runAsNonRoot needs to admit it
    assert handle.exec("id", "-u").stdout.strip() == "10001"
    refused = handle.exec("python", "-c", "open('/opt/venv/written', 'w')")
    assert refused.returncode != 0 and "Read-only file system" in refused.stderr
    assert handle.exec("python", "-c", "open('/tmp/written', 'w').write('ok')").returncode == 0


def test_the_image_answers_score_ready_and_metrics_as_the_source_tree_does(
    reward: tuple[Container, str, dict[str, Any]], source_tree: RewardServer
) -> None:
    handle, url, container = reward
    for path, body in REQUESTS:
        image_reply = httpx.post(url + path, json=body, timeout=60)
        tree_reply = httpx.post(source_tree.url + path, json=body, timeout=60)
        assert (image_reply.status_code, image_reply.json()) == (tree_reply.status_code, tree_reply.json()), (
            path,
            body,
        )
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):  # the rendered probes find what they ask for
        assert _get(url + container[probe]["httpGet"]["path"]) == 200, (probe, handle.logs())
    image_ready, tree_ready = httpx.get(url + "/ready", timeout=10), httpx.get(source_tree.url + "/ready", timeout=10)
    assert (image_ready.status_code, image_ready.json()) == (tree_ready.status_code, tree_ready.json())
    image_metrics, tree_metrics = _metrics(url), _metrics(source_tree.url)
    assert set(image_metrics) == set(tree_metrics)  # the same series, labels included
    counted = {key: value for key, value in image_metrics.items() if key[0] == "reward_service_requests_total"}
    assert counted and counted == {key: tree_metrics[key] for key in counted}


def _metrics(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(url + "/metrics", timeout=10).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_sigterm_stops_the_container_cleanly_within_its_grace_period(
    reward: tuple[Container, str, dict[str, Any]],
) -> None:
    handle, url, _ = reward
    assert httpx.post(url + "/score", json=REQUESTS[0][1], timeout=60).json() == 1.0
    pod, _ = reward_pod("unused")
    grace = pod.get("terminationGracePeriodSeconds", 30)  # Kubernetes' default when the pod spec sets none
    code = handle.stop(grace)
    # 0: the server shut down on SIGTERM by itself; 137 would mean podman had to SIGKILL it after the grace period
    assert code == 0, (code, handle.logs())
    assert "Finished server process" in handle.logs()
