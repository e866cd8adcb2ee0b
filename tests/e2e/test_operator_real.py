"""The operator, as a pod installed by the chart, drives runs on the real node: `kubectl apply` of a GRPORun whose
runtime (grpo_dev.localcluster.realruntime) describes this node, and KubeRay makes real head and worker pods from our
image, the reward service runs Ready through its probes, the launcher's preflight passes on the played GPU, the job
runs the launcher and the miles double in the worker pod (joined to the head through the head Service's DNS name,
with token auth), which scores through the reward Service's name and serves its gauges on the pod IP, where the
operator scrapes them, to Succeeded with the summary, the log tail and the provenance. Then the same node through the
operator: the plain image (no GPU played) fails its preflight and the run says which pod on which node; a worker pod
deleted mid-run saves, the run goes back to Provisioning and resumes from that save; a drain of the worker's node
does the same through the Eviction API; a worker whose step never ends goes at its grace without a save, and the
status says so; a suspended run resumes from its save; a deleted run leaves no pod. The faults a real cluster
delivers: Kueue's suspension of the running cluster (the head and the workers deleted at once) saves the model and
the data state before the head goes, and the next attempt's launcher says where it resumed; a launcher killed
outright holds no GPU past its marker's staleness and the ledger counts the teardown; a deleted head is a counted
restart from its save, and past recovery.maxRestarts `Failed/HeadLost`, and before that, in the same run, a Jobs
API away keeps the run `Running` and submits nothing; a bundle over a configmap quota still lets the stall stop the job;
a hung run's bundle names every process's frame without ptrace, holds the flight recorder's dump, and survives a pod
that no longer answers, and its tracker key, given by secretEnv, is kept nowhere.

Nothing rendered is edited: the runtime sizes and places every pod. What is played: the GPU (the `ray-node-gpu`
dev layer: stand-in libcuda, torch and nvidia-smi, devtools/images/gpu_standin/; the node advertises
`nvidia.com/gpu` through its status), miles (the double, devtools/grpo_dev/fake_miles.py, at miles's path in the
image, its knobs in the shared volume), and the shared file system (a tmpfs behind a hostPath volume).
"""

from __future__ import annotations

import ast
import base64
import gzip
import json
import os
import re
import secrets
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from grpo_dev.images import DEV_IMAGES
from grpo_dev.localcluster import SimulatedCluster, realplatform
from grpo_operator.controller.config import OperatorSettings
from grpo_operator.render import names

from tests.e2e.conftest import NAMESPACE

pytestmark = pytest.mark.integration

OPERATOR_NAMESPACE = realplatform.OPERATOR_NAMESPACE
WAIT_SECONDS = 420.0


def run_manifest(name: str, *, rollouts: int, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return realplatform.run_manifest(name, NAMESPACE, rollouts=rollouts, spec=spec)


def start(cluster: SimulatedCluster, platform: dict[str, Any], run: dict[str, Any], knobs: list[str]) -> str:
    return realplatform.start(cluster, platform["at"], run, knobs)


def status(cluster: SimulatedCluster, run: str) -> dict[str, Any]:
    found: dict[str, Any] = cluster.get_json("grporun", run, "-n", NAMESPACE).get("status") or {}
    return found


def pods(cluster: SimulatedCluster, run: str, component: str | None = None) -> list[dict[str, Any]]:
    selector = f"{names.RUN_LABEL}={run}" + (f",{names.COMPONENT_LABEL}={component}" if component else "")
    found: list[dict[str, Any]] = cluster.get_json("pods", "-n", NAMESPACE, "-l", selector)["items"]
    return found


def wait_for(what: str, probe: Callable[[], Any], describe: Callable[[], Any], seconds: float = WAIT_SECONDS) -> Any:
    """Poll `probe` until it returns something truthy; fail with `describe()` when the wait ends."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(1)
    pytest.fail(f"waited {seconds:.0f}s for {what}: {json.dumps(describe(), indent=1, default=str)[-6000:]}")


def phase_is(cluster: SimulatedCluster, run: str, *phases: str) -> Callable[[], dict[str, Any] | None]:
    def probe() -> dict[str, Any] | None:
        found = status(cluster, run)
        return found if found.get("phase") in phases else None

    return probe


def delete_run(cluster: SimulatedCluster, run: str) -> None:
    """Delete the run and wait until no pod of it is left (the owner references take its children with it)."""
    cluster.kubectl("delete", "grporun", run, "-n", NAMESPACE, "--wait=true", "--timeout=120s")
    wait_for(
        f"no pod of {run}", lambda: not pods(cluster, run), lambda: [p["metadata"]["name"] for p in pods(cluster, run)]
    )


def _container_log(cluster: SimulatedCluster, pod: dict[str, Any], container: str | None = None) -> str:
    args = ["logs", "-n", NAMESPACE, pod["metadata"]["name"], *(["-c", container] if container else [])]
    return cluster.kubectl(*args).stdout


def _exec(cluster: SimulatedCluster, pod: dict[str, Any], *argv: str) -> str:
    return cluster.kubectl("exec", "-n", NAMESPACE, pod["metadata"]["name"], "--", *argv).stdout


def _running(pod: dict[str, Any]) -> bool:
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return bool(statuses) and all("running" in s.get("state", {}) for s in statuses)


RAY_NODES = (
    "import json, ray; ray.init(address='auto', logging_level='ERROR'); "
    "print(json.dumps([[n['NodeManagerAddress'], n['Resources']] for n in ray.nodes() if n['Alive']]))"
)
JOBS_WITHOUT_TOKEN = (
    "import urllib.request, urllib.error\n"
    "try:\n urllib.request.urlopen('http://127.0.0.1:8265/api/jobs/', timeout=10); print('open')\n"
    "except urllib.error.HTTPError as e:\n print(e.code)"
)
EVAL_LINE = re.compile(r"\beval (\d+): (\{.*\})\s*$", re.MULTILINE)
REWARD_METRICS = (
    "import urllib.request; print(urllib.request.urlopen('http://{service}.{namespace}.svc.cluster.local:8000/metrics',"
    " timeout=10).read().decode())"
)


def test_a_run_applied_with_kubectl_runs_in_real_pods_driven_by_the_operator_pod_to_succeeded(
    real_cluster: SimulatedCluster, platform: dict[str, Any]
) -> None:
    evaluation = {"eval": {"name": "aime", "promptData": f"{realplatform.MOUNT}/data/prompts.jsonl", "interval": 2}}
    manifest = run_manifest("real-op", rollouts=8, spec=evaluation)
    run = start(real_cluster, platform, manifest, ["--fake-step-seconds", "4", "--fake-eval-score", "0.25,0.5,0.375"])
    # The operator itself is a pod of the chart on the real node, talking to the API server in-cluster.
    [operator] = real_cluster.get_json("pods", "-n", OPERATOR_NAMESPACE, "-l", "app.kubernetes.io/name=grpo-operator")[
        "items"
    ]
    assert operator["spec"]["nodeName"] == platform["node"]
    assert operator["spec"]["serviceAccountName"] == platform["deployment"]
    # While it runs (a finished run deletes its RayCluster): the rollout gauges scraped from the worker pod's IP.
    running = wait_for("rollout 2 scraped", _rollout(real_cluster, run, 2), lambda: status(real_cluster, run))
    assert running["metrics"]["source"] == "Scrape", running["metrics"]
    # The pods really run, from our images, on the real node: container IDs, and their own logs.
    found = {c: pods(real_cluster, run, c) for c in ("ray-head", "ray-worker", "reward")}
    for component, members in found.items():
        assert len(members) == 1, (component, [p["metadata"]["name"] for p in members])
        [pod] = members
        assert pod["spec"]["nodeName"] == platform["node"], component
        assert all(s["containerID"].startswith("containerd://") for s in pod["status"]["containerStatuses"])
    head, worker, reward = (found[c][0] for c in ("ray-head", "ray-worker", "reward"))
    assert worker["spec"]["containers"][0]["image"] == DEV_IMAGES["ray-node-gpu"].reference
    assert "Ray runtime started" in _container_log(real_cluster, head)
    assert "Ray runtime started" in _container_log(real_cluster, worker)
    assert "Uvicorn running on" in _container_log(real_cluster, reward)
    # The worker joined the head through the head Service's DNS name (KubeRay's address; CoreDNS and kube-proxy
    # carry it), and the rendered rayStartParams reached Ray.
    assert f"{names.ray_cluster(run)}-head-svc.{NAMESPACE}.svc.cluster.local" in json.dumps(
        worker["spec"]["containers"]
    )
    alive = json.loads(_exec(real_cluster, head, "python3", "-c", RAY_NODES).strip().splitlines()[-1])
    by_ip = {ip: resources for ip, resources in alive}
    assert set(by_ip) == {head["status"]["podIP"], worker["status"]["podIP"]}, by_ip
    assert "gpu_node" in by_ip[worker["status"]["podIP"]], by_ip
    # Token auth is on: the head's Jobs API refuses a caller without the token (the operator pod holds it).
    assert _exec(real_cluster, head, "python3", "-c", JOBS_WITHOUT_TOKEN).strip() == "401"
    # The worker's preflight init container ran for real and passed on the played GPU.
    preflight = _container_log(real_cluster, worker, names.PREFLIGHT_CONTAINER)
    assert "[pass] libcuda:" in preflight and "[pass] gpus: 1 x" in preflight, preflight
    # The job's driver runs in the worker pod: its log there holds the double's rollout lines and the rewards it
    # got through the reward Service's name, which counted them.
    driver = _exec(real_cluster, worker, "sh", "-c", "cat /tmp/ray/session_latest/logs/job-driver-*.log")
    service = names.reward_service(run)
    assert "rollout 1: {" in driver, driver[-3000:]
    assert f"reward 1: [1.0, 0.0] from http://{service}.{NAMESPACE}.svc.cluster.local:8000/score" in driver
    scored = _exec(real_cluster, worker, "python3", "-c", REWARD_METRICS.format(service=service, namespace=NAMESPACE))
    counted = re.search(r'^reward_service_requests_total\{outcome="scored"\} ([0-9.]+)$', scored, re.MULTILINE)
    assert counted is not None and float(counted[1]) >= 4, scored  # two rollouts of two samples at least
    line = next(ln for ln in driver.splitlines() if "rollout 1: {" in ln)
    done = wait_for("Succeeded", phase_is(real_cluster, run, "Succeeded", "Failed"), lambda: status(real_cluster, run))
    assert done["phase"] == "Succeeded", done
    # The status: the summary, the log tail kept after the pods go (the same lines), the provenance of what ran.
    conditions = {c["type"]: c for c in done["conditions"]}
    assert conditions["MetricsAvailable"]["reason"] == "RunSummary", conditions["MetricsAvailable"]
    assert conditions["RewardServiceReady"]["status"] == "True", conditions["RewardServiceReady"]
    logs = real_cluster.get_json("configmap", done["logs"]["configMap"], "-n", NAMESPACE)["data"][done["logs"]["key"]]
    assert line.strip() in logs and "rollout 7: {" in logs and "GRPO_RUN_SUMMARY" in logs, logs[-2000:]
    # The evaluations: what the double logged as miles does (`eval <rollout>: {...}`), in the status and the column.
    logged = [(int(m[1]), ast.literal_eval(m[2])["eval/aime"]) for m in EVAL_LINE.finditer(logs)]
    [aime] = done["evaluation"]
    assert logged and [(p["rollout"], p["score"]) for p in aime["history"]] == logged, (aime, logged)
    assert (aime["baseline"], aime["last"], aime["best"]) == (logged[0][1], logged[-1][1], 0.5), aime
    table = real_cluster.kubectl("get", "grporun", run, "-n", NAMESPACE).stdout.splitlines()
    column = table[0].index(" EVAL ") + 1  # kubectl aligns each value under its header (PROGRESS holds spaces)
    assert table[1][column:].split()[0] == f"{logged[-1][1]:g}", table
    provenance = done["provenance"]
    assert provenance["imageId"] == worker["status"]["containerStatuses"][0]["imageID"], provenance
    assert provenance["launcher"] and provenance["ray"] == "2.60.0", provenance
    delete_run(real_cluster, run)


def test_the_plain_image_fails_its_preflight_and_the_run_names_the_pod_and_the_node(
    real_cluster: SimulatedCluster, platform: dict[str, Any]
) -> None:
    # The ray-node layer without the GPU stand-in: libcuda cannot be loaded, as on a node whose runtime injects none.
    plain = run_manifest("real-preflight", rollouts=2, spec={"image": DEV_IMAGES["ray-node"].reference})
    run = start(real_cluster, platform, plain, [])
    [worker] = wait_for(
        "the worker pod", lambda: pods(real_cluster, run, "ray-worker"), lambda: status(real_cluster, run)
    )
    expected = f"pod {worker['metadata']['name']} on node {platform['node']}: preflight failed: libcuda: "
    # The init container's termination message reaches the run, which ends Failed/PreflightFailed: the kubelet's
    # retries would run the same checks on the same node.

    def saying() -> dict[str, Any] | None:
        found = status(real_cluster, run)
        return found if found.get("phase") == "Failed" else None

    said = wait_for("the run to fail", saying, lambda: status(real_cluster, run))
    assert said["reason"] == "PreflightFailed" and said["message"].startswith(expected), said
    assert "libcuda.so.1 cannot be loaded" in said["message"], said["message"]
    delete_run(real_cluster, run)


def _rollout(cluster: SimulatedCluster, run: str, at_least: int) -> Callable[[], dict[str, Any] | None]:
    def probe() -> dict[str, Any] | None:
        found = status(cluster, run)
        rollout = (found.get("metrics") or {}).get("rollout")
        return found if found.get("phase") == "Running" and rollout is not None and rollout >= at_least else None

    return probe


def _saved(platform: dict[str, Any], run: str) -> int:
    """The iteration miles's tracker names in the run's checkpoint directory (-1: none)."""
    tracker = Path(platform["shared"]) / "grpo" / NAMESPACE / run / "checkpoints" / "latest_checkpointed_iteration.txt"
    return int(tracker.read_text()) if tracker.is_file() else -1


def phases_until_it_ends(cluster: SimulatedCluster, run: str) -> list[str]:
    """The phases the run shows, in order, until Succeeded or Failed; fails when the wait ends first."""
    seen: list[str] = []

    def ended() -> bool:
        phase = status(cluster, run).get("phase")
        if phase and (not seen or seen[-1] != phase):
            seen.append(phase)
        return phase in ("Succeeded", "Failed")

    wait_for(f"{run} to end", ended, lambda: {"seen": seen, "status": status(cluster, run)})
    return seen


def test_a_worker_pod_deleted_mid_run_saves_and_the_run_resumes_after_that_save(
    real_cluster: SimulatedCluster, platform: dict[str, Any]
) -> None:
    manifest = run_manifest("real-kill", rollouts=10)  # recovery.maxRestarts 0: a planned stop costs none
    run = start(real_cluster, platform, manifest, ["--fake-step-seconds", "3"])
    wait_for("rollout 2 scraped", _rollout(real_cluster, run, 2), lambda: status(real_cluster, run))
    [worker] = pods(real_cluster, run, "ray-worker")
    real_cluster.kubectl("delete", "pod", "-n", NAMESPACE, worker["metadata"]["name"], "--wait=true", "--timeout=300s")
    saved = _saved(platform, run)
    assert saved >= 2, f"the worker's preStop made no save after rollout 2 (tracker: {saved})"
    seen = phases_until_it_ends(real_cluster, run)
    done = status(real_cluster, run)
    assert "Provisioning" in seen, seen
    assert done["phase"] == "Succeeded", done
    attempts = done["accounting"]["attempts"]
    assert len(attempts) == 2 and attempts[1]["firstRollout"] == saved + 1, attempts
    assert attempts[0]["stoppedBy"] == "Deleted" and "restarts" not in done, done
    delete_run(real_cluster, run)


def test_a_suspended_run_stops_its_pods_and_resumes_from_its_save(
    real_cluster: SimulatedCluster, platform: dict[str, Any]
) -> None:
    run = start(real_cluster, platform, run_manifest("real-suspend", rollouts=8), ["--fake-step-seconds", "3"])
    wait_for("rollout 1 scraped", _rollout(real_cluster, run, 1), lambda: status(real_cluster, run))
    real_cluster.kubectl("patch", "grporun", run, "-n", NAMESPACE, "--type=merge", "-p", '{"spec":{"suspend":true}}')
    wait_for("Suspended", phase_is(real_cluster, run, "Suspended", "Failed"), lambda: status(real_cluster, run))
    assert status(real_cluster, run)["phase"] == "Suspended"
    wait_for(
        "the Ray pods gone",
        lambda: not pods(real_cluster, run, "ray-worker") and not pods(real_cluster, run, "ray-head"),
        lambda: [p["metadata"]["name"] for p in pods(real_cluster, run)],
    )
    saved = _saved(platform, run)
    assert saved >= 1, saved
    real_cluster.kubectl("patch", "grporun", run, "-n", NAMESPACE, "--type=merge", "-p", '{"spec":{"suspend":false}}')
    done = wait_for("Succeeded", phase_is(real_cluster, run, "Succeeded", "Failed"), lambda: status(real_cluster, run))
    assert done["phase"] == "Succeeded", done
    attempts = done["accounting"]["attempts"]
    assert len(attempts) == 2 and attempts[1]["firstRollout"] == saved + 1, attempts
    delete_run(real_cluster, run)


def _events(cluster: SimulatedCluster, run: str) -> list[dict[str, Any]]:
    """The run's events (what `kubectl describe grporun` lists), oldest first."""
    found: list[dict[str, Any]] = cluster.get_json(
        "events", "-n", NAMESPACE, "--field-selector", f"involvedObject.kind=GRPORun,involvedObject.name={run}"
    )["items"]
    return sorted(found, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")


def _prestop_report(platform: dict[str, Any], run: str) -> dict[str, Any]:
    """The worker's preStop hook's own outcome (grpo_launcher.presave's report beside the checkpoints)."""
    report = Path(platform["shared"]) / "grpo" / NAMESPACE / run / "checkpoints" / "preemption-save.json"
    found: dict[str, Any] = json.loads(report.read_text())["preStopSave"] if report.is_file() else {}
    return found


def test_a_drain_of_the_workers_node_saves_through_the_sentinel_before_the_pod_goes_and_the_run_resumes_after_it(
    real_cluster: SimulatedCluster, platform: dict[str, Any]
) -> None:
    """`kubectl drain` of the worker's node evicts the worker through the Eviction API; its preStop hook touches
    miles's sentinel, the double saves after the step in flight (as miles's train.py:120-126), the hook sees the
    tracker name that rollout and stops the pod's Ray; the run goes back to Provisioning, and once the node is
    uncordoned the next attempt starts at that rollout + 1; the first attempt's save record and an event say so.

    The drain selects the run's worker (`--pod-selector`): this machine has one real node, which also holds the
    head, the reward service and the operator pod. A full drain would evict those too (the head holds Ray's job
    record, the operator would be away while the run resumes) and test a topology no platform runs: there the head
    and the reward service sit on CPU nodes and a GPU node's drain evicts only the workers. The selector drain does
    what that drain does to the run: the node is cordoned, the worker is evicted (not deleted) and its replacement
    stays Pending until `kubectl uncordon`, as it would until another GPU node takes it."""
    manifest = run_manifest("real-drain", rollouts=10)  # recovery.maxRestarts 0: a drain costs no restart
    run = start(real_cluster, platform, manifest, ["--fake-step-seconds", "3"])
    seen = wait_for("rollout 2 scraped", _rollout(real_cluster, run, 2), lambda: status(real_cluster, run))
    assert _saved(platform, run) == -1, "no save before the drain (saveInterval is the run's length)"
    [worker] = pods(real_cluster, run, "ray-worker")
    node = platform["node"]
    assert worker["spec"]["nodeName"] == node
    selector = f"{names.RUN_LABEL}={run},{names.COMPONENT_LABEL}=ray-worker"
    try:
        # Returns once the evicted pod is gone: its preStop hook (the save) has run by then.
        drained = real_cluster.kubectl(
            "drain",
            node,
            f"--pod-selector={selector}",
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--timeout=240s",
        )
    finally:
        real_cluster.kubectl("uncordon", node)
    assert f"evicting pod {NAMESPACE}/{worker['metadata']['name']}" in drained.stdout + drained.stderr, drained
    saved = _saved(platform, run)
    report = _prestop_report(platform, run)
    # The hook asked through the sentinel and saw the save: the tracker names the rollout in flight or after.
    assert report.get("saved") is True and report["iteration"] == saved, report
    assert saved >= seen["metrics"]["rollout"], (saved, seen["metrics"])
    phases = phases_until_it_ends(real_cluster, run)
    done = status(real_cluster, run)
    events = [(e["reason"], e["message"]) for e in _events(real_cluster, run)]
    assert "Provisioning" in phases, phases
    assert done["phase"] == "Succeeded", done
    first, second = done["accounting"]["attempts"]
    assert second["firstRollout"] == saved + 1, done["accounting"]
    assert "restarts" not in done, done  # the drain's restart is not one of recovery.maxRestarts
    # The operator saw the eviction on the pod (its DisruptionTarget condition) and, once attempt 2 showed the
    # checkpoint it loaded, recorded the save and said so.
    assert first["stoppedBy"] == "EvictionByEvictionAPI", first
    assert first["save"]["outcome"] == "Saved" and first["save"]["rollout"] == saved, first
    assert first["save"]["seconds"] == first["podsGoneSeconds"] <= first["graceSeconds"], first
    said = [m for r, m in events if r == "SavedBeforeStop"]
    assert len(said) == 1 and f"saved rollout {saved} in " in said[0] and "before eviction" in said[0], events
    delete_run(real_cluster, run)


def test_when_the_step_never_ends_the_hook_gives_up_at_the_grace_the_pod_goes_and_the_status_says_no_save(
    real_cluster: SimulatedCluster, platform: dict[str, Any]
) -> None:
    """The double stalls in rollout 3's step, as a miles whose step hangs: it never reaches the sentinel check. The
    deleted worker's preStop hook asks, waits until 15 s before the pod's grace ends, reports no save and stops the
    pod's Ray; the pod goes within its grace. The next attempt (the double no longer stalling) starts from what
    was there before, no checkpoint, and the status and an event say the save was not made and where it resumed."""
    manifest = run_manifest("real-hang", rollouts=6)
    run = start(real_cluster, platform, manifest, ["--fake-step-seconds", "3", "--fake-stall-after", "3"])
    wait_for("rollout 2 scraped", _rollout(real_cluster, run, 2), lambda: status(real_cluster, run))
    knobs = Path(platform["shared"]) / "fake-knobs" / f"{run}.json"
    knobs.write_text(json.dumps([*realplatform.DOUBLE, "--fake-step-seconds", "3"]))  # read by the next attempt
    [worker] = pods(real_cluster, run, "ray-worker")
    grace = worker["spec"]["terminationGracePeriodSeconds"]
    real_cluster.kubectl("delete", "pod", "-n", NAMESPACE, worker["metadata"]["name"], "--wait=true", "--timeout=300s")
    report = _prestop_report(platform, run)
    # It asked the running miles, waited its whole wait (the grace less its margin) and names what the next attempt
    # will load: nothing.
    assert report.get("saved") is False and report["miles_running"] and report["iteration"] is None, report
    assert report["wait_seconds"] < grace and report["seconds"] >= report["wait_seconds"], (grace, report)
    assert _saved(platform, run) == -1
    assert phases_until_it_ends(real_cluster, run)[-1] == "Succeeded", status(real_cluster, run)
    done = status(real_cluster, run)
    first, second = done["accounting"]["attempts"]
    assert first["stoppedBy"] == "Deleted" and second["firstRollout"] == 0, done["accounting"]
    assert first["save"]["outcome"] == "NotSaved" and first["save"]["rollout"] == -1, first
    said = [
        m for r, m in ((e["reason"], e["message"]) for e in _events(real_cluster, run)) if r == "NotSavedBeforeStop"
    ]
    assert len(said) == 1 and "made no checkpoint after rollout 2 before deletion" in said[0], said
    assert "attempt 2 resumed from rollout 0" in said[0], said
    delete_run(real_cluster, run)


def _head_report(platform: dict[str, Any], run: str) -> dict[str, Any]:
    """The head's preStop hook's own outcome (it runs the workers' hook, marked --head)."""
    report = Path(platform["shared"]) / "grpo" / NAMESPACE / run / "checkpoints" / "preemption-save-head.json"
    found: dict[str, Any] = json.loads(report.read_text())["preStopSave"] if report.is_file() else {}
    return found


def _patch_cluster(cluster: SimulatedCluster, run: str, suspend: bool) -> None:
    body = json.dumps({"spec": {"suspend": suspend}})
    cluster.kubectl("patch", "raycluster", names.ray_cluster(run), "-n", NAMESPACE, "--type=merge", "-p", body)


def test_a_kueue_style_suspension_of_the_running_cluster_saves_model_and_data_state_before_the_head_goes(
    real_cluster: SimulatedCluster, platform: dict[str, Any]
) -> None:
    """What Kueue does to an admitted run it evicts, played by the two patches Kueue makes on the RayCluster (the
    Kueue manager is not run on this node: no Workload exists, so the run's reason is the generic `Evicted` and
    its message says no Workload said why; the reason table is tests/status/test_kueue_eviction.py). The run is
    queued (its RayCluster carries the queue label and is created suspended); `suspend: false` admits it; mid-run
    `suspend: true` makes KubeRay delete the head and the worker at once (DeleteAllOf), with their real grace and
    preStop hooks. The operator stops nothing while the pods save; the double saves the model, then the rollout
    data state 5 s later, then deletes the sentinel, as miles's train.py:76-90,120-126; the worker's and the head's
    hooks return only then (the head's GCS up through the save). After `suspend: false` attempt 2's launcher says
    it resumes from that checkpoint with its data state, and the status judges the save from that line."""
    manifest = run_manifest("real-evict", rollouts=10, spec={"scheduling": {"queueName": "lq"}})
    run = start(real_cluster, platform, manifest, ["--fake-step-seconds", "3", "--fake-data-state-seconds", "5"])
    # Pending/Provisioning while the operator creates the RayCluster, then Queued: the RayCluster is suspended.
    queued = wait_for(
        "Pending/Queued",
        lambda: (found := status(real_cluster, run)) and (found.get("reason") != "Provisioning") and found,
        lambda: status(real_cluster, run),
    )
    assert (queued["phase"], queued["reason"]) == ("Pending", "Queued"), queued
    _patch_cluster(real_cluster, run, False)  # Kueue's admission
    seen = wait_for("rollout 2 scraped", _rollout(real_cluster, run, 2), lambda: status(real_cluster, run))
    _patch_cluster(real_cluster, run, True)  # Kueue's eviction
    suspended = wait_for(
        "Suspended", phase_is(real_cluster, run, "Suspended", "Failed"), lambda: status(real_cluster, run)
    )
    assert (suspended["phase"], suspended["reason"]) == ("Suspended", "Evicted"), suspended
    assert "LocalQueue lq" in suspended["message"], suspended
    wait_for(
        "the Ray pods gone",
        lambda: not pods(real_cluster, run, "ray-worker") and not pods(real_cluster, run, "ray-head"),
        lambda: [p["metadata"]["name"] for p in pods(real_cluster, run)],
    )
    saved = _saved(platform, run)
    worker, head = _prestop_report(platform, run), _head_report(platform, run)
    checkpoints = Path(platform["shared"]) / "grpo" / NAMESPACE / run / "checkpoints"
    # miles said saved (the sentinel gone), and the data state of that same rollout is there.
    assert worker.get("saved") is True and worker["iteration"] == saved >= seen["metrics"]["rollout"], worker
    assert worker["data_state"] is True, worker
    assert (checkpoints / "rollout" / f"global_dataset_state_dict_{saved}.pt").is_file()
    # The head's hook waited for the same save: GCS was up until miles had written it.
    assert head.get("saved") is True and head["iteration"] == saved and head["data_state"] is True, head
    assert not any(e["reason"] == "FailedPreStopHook" for e in _pod_events(real_cluster, run)), _pod_events(
        real_cluster, run
    )
    _patch_cluster(real_cluster, run, False)  # readmitted
    done = wait_for("Succeeded", phase_is(real_cluster, run, "Succeeded", "Failed"), lambda: status(real_cluster, run))
    assert done["phase"] == "Succeeded", done
    first, second = done["accounting"]["attempts"]
    assert (second["resumedFrom"], second["resumedDataState"], second["firstRollout"]) == (saved, True, saved + 1)
    assert first["endReason"] == "Evicted", first
    assert first["save"]["outcome"] == "Saved" and first["save"]["rollout"] == saved, first
    assert first["save"]["dataState"] is True, first
    said = [m for r, m in ((e["reason"], e["message"]) for e in _events(real_cluster, run)) if r == "SavedBeforeStop"]
    assert len(said) == 1 and f"saved rollout {saved}" in said[0] and f"resumed at rollout {saved + 1}" in said[0]
    delete_run(real_cluster, run)


def _pod_events(cluster: SimulatedCluster, run: str) -> list[dict[str, Any]]:
    """The events of the run's pods (a failed preStop hook is one: FailedPreStopHook)."""
    found: list[dict[str, Any]] = cluster.get_json(
        "events", "-n", NAMESPACE, "--field-selector", "involvedObject.kind=Pod"
    )["items"]
    return [e for e in found if e["involvedObject"]["name"].startswith(names.ray_cluster(run))]


KILL_LAUNCHER = (
    "import os, signal\n"
    "for pid in [p for p in os.listdir('/proc') if p.isdigit()]:\n"
    "    try:\n"
    "        argv = open(f'/proc/{pid}/cmdline', 'rb').read().split(b'\\0')\n"
    "    except OSError:\n"
    "        continue\n"
    "    if b'grpo_launcher' in argv and b'run' in argv:\n"
    "        os.kill(int(pid), signal.SIGKILL); print(pid)\n"
)


def test_a_launcher_killed_outright_leaves_a_marker_that_holds_no_gpu_past_its_staleness_and_the_ledger_counts_it(
    real_cluster: SimulatedCluster, platform: dict[str, Any]
) -> None:
    """SIGKILL of the launcher (as a node loss, `ray stop`'s escalation or an OOM group kill does): its `finally`
    never runs, so its marker stays beside the checkpoints. The job fails and the run ends `Failed`; the operator
    deletes the RayCluster and the worker's preStop hook finds a marker no longer refreshed: it returns once the
    marker is 30 s old (three refresh periods), not after the grace, and the GPU time until the pod is gone is in
    the ledger (teardownGpuSeconds)."""
    run = start(real_cluster, platform, run_manifest("real-sigkill", rollouts=40), ["--fake-step-seconds", "3"])
    wait_for("rollout 2 scraped", _rollout(real_cluster, run, 2), lambda: status(real_cluster, run))
    [worker] = pods(real_cluster, run, "ray-worker")
    grace = worker["spec"]["terminationGracePeriodSeconds"]
    killed = _exec(real_cluster, worker, "python3", "-c", KILL_LAUNCHER).split()
    assert killed, "no launcher process found in the worker"
    marker = Path(platform["shared"]) / "grpo" / NAMESPACE / run / "checkpoints" / ".grpo-miles-running"
    assert marker.is_file()  # left behind: the launcher's finally never ran
    failed = wait_for("Failed", phase_is(real_cluster, run, "Failed", "Succeeded"), lambda: status(real_cluster, run))
    assert failed["phase"] == "Failed", failed
    wait_for("the worker gone", lambda: not pods(real_cluster, run, "ray-worker"), lambda: status(real_cluster, run))
    report = _prestop_report(platform, run)
    # The hook read the stale marker as a dead launcher: at once, or within three periods and a poll of it.
    assert report and report["saved"] is False, report
    assert report["seconds"] <= 30 + 2 < report["wait_seconds"] <= grace, (grace, report)

    def counted() -> dict[str, Any] | None:
        ledger = status(real_cluster, run).get("accounting") or {}
        return ledger if ledger.get("gpus") == 0 and ledger.get("teardownGpuSeconds", 0) > 0 else None

    ledger = wait_for("the teardown counted", counted, lambda: status(real_cluster, run))
    assert ledger["attempts"][-1]["podsGoneSeconds"] is not None, ledger
    delete_run(real_cluster, run)


def _attempt(cluster: SimulatedCluster, run: str, number: int, at_least: int) -> Callable[[], dict[str, Any] | None]:
    """Attempt `number` Running with a rollout at or after `at_least` scraped."""

    def probe() -> dict[str, Any] | None:
        found = _rollout(cluster, run, at_least)()
        return found if found is not None and found.get("attempt") == number else None

    return probe


def _jobs_api_away(cluster: SimulatedCluster, run: str) -> dict[str, Any]:
    """The head's Service selects nothing until the run's status says the Jobs API cannot be reached, then selects
    the head again: that status, and every phase seen meanwhile."""
    service = names.head_service(run)
    selector = cluster.get_json("service", service, "-n", NAMESPACE)["spec"]["selector"]
    away = json.dumps({"spec": {"selector": {**{k: None for k in selector}, "grpo.dev/nothing": "selected"}}})
    cluster.kubectl("patch", "service", service, "-n", NAMESPACE, "--type=merge", "-p", away)
    phases: list[str] = []

    def unreachable_said() -> dict[str, Any] | None:
        found = status(cluster, run)
        phases.append(found.get("phase", ""))
        return found if "cannot be reached" in (found.get("message") or "") else None

    try:
        said: dict[str, Any] = wait_for("the unreachable Jobs API said", unreachable_said, lambda: status(cluster, run))
    finally:
        back = json.dumps({"spec": {"selector": {"grpo.dev/nothing": None, **selector}}})
        cluster.kubectl("patch", "service", service, "-n", NAMESPACE, "--type=merge", "-p", back)
    return {**said, "phasesSeen": sorted(set(phases))}


def test_a_jobs_api_away_keeps_the_run_running_and_a_deleted_head_is_a_counted_restart_from_its_save(
    real_cluster: SimulatedCluster, platform: dict[str, Any]
) -> None:
    """One run, two faults of the head. First its Service selects nothing for a while (the selector patched away,
    then back): the operator's Jobs API calls find no head; the run stays `Running`, says the API cannot be
    reached, and submits nothing; once the head is selected again the same attempt goes on. Then `kubectl delete
    pod` of the head (what a drain of its CPU node or a consolidation would do without the head's budget): its
    preStop hook asks miles for a checkpoint and waits for it, then stops the head's Ray; the job's record goes
    with the head (no GCS fault tolerance). The head KubeRay makes again answers without the job: attempt 1 ends
    as `HeadLost`, a restart counted against recovery.maxRestarts (1), and attempt 2 resumes from that save. The
    second delete is past the limit: the run ends `Failed/HeadLost`."""
    manifest = run_manifest("real-head", rollouts=60, spec={"recovery": {"maxRestarts": 1}})
    run = start(real_cluster, platform, manifest, ["--fake-step-seconds", "3"])
    seen = wait_for("rollout 1 scraped", _rollout(real_cluster, run, 1), lambda: status(real_cluster, run))
    said = _jobs_api_away(real_cluster, run)
    assert (said["phase"], said["reason"], said["phasesSeen"]) == ("Running", "Running", ["Running"]), said
    assert said["jobSubmissionId"] == seen["jobSubmissionId"] and said["attempt"] == 1, said
    again = wait_for(
        "the same attempt goes on",
        _attempt(real_cluster, run, 1, said["metrics"]["rollout"] + 1),
        lambda: status(real_cluster, run),
    )
    assert again["jobSubmissionId"] == seen["jobSubmissionId"] and len(again["accounting"]["attempts"]) == 1, again
    [head] = pods(real_cluster, run, "ray-head")
    real_cluster.kubectl("delete", "pod", "-n", NAMESPACE, head["metadata"]["name"], "--wait=true", "--timeout=300s")
    saved = _saved(platform, run)
    assert _head_report(platform, run).get("saved") is True and saved >= 2, _head_report(platform, run)
    second = wait_for("attempt 2 running", _attempt(real_cluster, run, 2, saved + 1), lambda: status(real_cluster, run))
    assert second["restarts"] == 1, second
    first = second["accounting"]["attempts"][0]
    assert (first["endPhase"], first["endReason"]) == ("Provisioning", "Restarting"), first
    assert second["accounting"]["attempts"][1]["resumedFrom"] == saved, second["accounting"]
    restarted = [m for r, m in ((e["reason"], e["message"]) for e in _events(real_cluster, run)) if r == "Restarted"]
    assert len(restarted) == 1 and "restart 1 of recovery.maxRestarts 1" in restarted[0], restarted
    assert "HeadLost" in restarted[0] and "has no job" in restarted[0], restarted
    [head] = pods(real_cluster, run, "ray-head")
    real_cluster.kubectl("delete", "pod", "-n", NAMESPACE, head["metadata"]["name"], "--wait=true", "--timeout=300s")
    failed = wait_for("Failed", phase_is(real_cluster, run, "Failed", "Succeeded"), lambda: status(real_cluster, run))
    assert (failed["phase"], failed["reason"]) == ("Failed", "HeadLost"), failed
    assert "has no job" in failed["message"] and "after 1 restart" in failed["message"], failed["message"]
    delete_run(real_cluster, run)


def test_a_bundle_over_the_namespaces_configmap_quota_still_lets_the_stall_stop_the_job(
    real_cluster: SimulatedCluster, platform: dict[str, Any]
) -> None:
    """A ResourceQuota on count/configmaps at its limit when the stall guard trips: the evidence bundle's ConfigMap
    is refused (403, exceeded quota), the job is stopped all the same, the run is `Failed/Stalled`, and an event and
    the status say the bundle could not be written. The stall timeout is short only so the trip comes soon; nothing
    asserted depends on it."""
    spec = {"guards": {"stallTimeoutSeconds": 30, "startupGraceSeconds": 0}}
    run = start(real_cluster, platform, run_manifest("real-quota", rollouts=40, spec=spec), ["--fake-stall-after", "2"])
    wait_for("rollout 1 scraped", _rollout(real_cluster, run, 1), lambda: status(real_cluster, run))
    count = len(real_cluster.get_json("configmaps", "-n", NAMESPACE)["items"])
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "configmaps-at-limit", "namespace": NAMESPACE},
        "spec": {"hard": {"count/configmaps": str(count)}},
    }
    real_cluster.kubectl("apply", "-f", "-", input=json.dumps(quota))
    try:
        failed = wait_for(
            "Failed", phase_is(real_cluster, run, "Failed", "Succeeded"), lambda: status(real_cluster, run)
        )
    finally:
        real_cluster.kubectl("delete", "resourcequota", "configmaps-at-limit", "-n", NAMESPACE, "--ignore-not-found")
    assert (failed["phase"], failed["reason"]) == ("Failed", "Stalled"), failed
    [bundle] = failed["forensics"]
    assert "exceeded quota" in bundle["captureFailed"], bundle
    wait_for("the Ray pods gone", lambda: not pods(real_cluster, run, "ray-worker"), lambda: status(real_cluster, run))
    # The job was stopped before the RayCluster went: the worker's hook found miles no longer running (a job still
    # running, stalled, would have kept its marker fresh and the hook waiting for a save).
    assert _prestop_report(platform, run).get("miles_running") is False, _prestop_report(platform, run)
    warnings = [e["message"] for e in _events(real_cluster, run) if e["reason"] == "CaptureFailed"]
    assert warnings and "exceeded quota" in warnings[0], _events(real_cluster, run)
    delete_run(real_cluster, run)


FRAMES = ("fake_driver_waits_in_rollout", "fake_actor_waits_in_generate", "fake_scheduler_waits_for_batch")
CAPTURE_BUDGET_SECONDS = OperatorSettings.model_fields["capture_budget_seconds"].default  # the chart sets none


def _config_map(cluster: SimulatedCluster, name: str) -> dict[str, str]:
    """A ConfigMap's data, its gzip'd pieces (an evidence bundle's) unpacked under their names."""
    found = cluster.get_json("configmap", name, "-n", NAMESPACE)
    binary = (found.get("binaryData") or {}).items()
    texts = {k.removesuffix(".gz"): gzip.decompress(base64.b64decode(v)).decode(errors="replace") for k, v in binary}
    return {**texts, **(found.get("data") or {})}


def _capture(cluster: SimulatedCluster, run: str, value: str) -> dict[str, str]:
    """A bundle asked for with the grpo.dev/capture annotation: its pieces once the request is handled."""
    cluster.kubectl("annotate", "grporun", run, "-n", NAMESPACE, f"grpo.dev/capture={value}", "--overwrite")
    done = wait_for(
        f"the capture {value} handled",
        lambda: (found := status(cluster, run)).get("captureHandled") == value and found,
        lambda: status(cluster, run),
    )
    return _config_map(cluster, done["forensics"][-1]["configMap"])


def _raylet_and_agent(pod: dict[str, Any]) -> list[int]:
    """This machine's pids of a pod's raylet and its agents (its containers' cgroups name the pod's uid)."""
    uid = pod["metadata"]["uid"]
    marks = (f"pod{uid}", f"pod{uid.replace('-', '_')}")
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cgroup = (proc / "cgroup").read_text() if proc.name.isdigit() else ""
            argv = (proc / "cmdline").read_bytes().split(b"\0") if cgroup else []
        except OSError:
            continue
        # The agent renames itself (setproctitle: `ray::DashboardAgent`), the runtime-env agent keeps its script.
        ray = any(a.endswith((b"/raylet", b"dashboard/agent.py", b"agent/main.py", b"DashboardAgent")) for a in argv)
        if ray and any(m in cgroup for m in marks):
            found.append(int(proc.name))
    return found


def _written_for(cluster: SimulatedCluster, run: str) -> dict[str, str]:
    """Every place the operator writes for a run, as text: each ConfigMap of the namespace (a bundle's pieces
    unpacked), the run's status and its events."""
    places = {
        f"ConfigMap/{m['metadata']['name']}": json.dumps(_config_map(cluster, m["metadata"]["name"]))
        for m in cluster.get_json("configmaps", "-n", NAMESPACE)["items"]
    }
    places["status"] = json.dumps(status(cluster, run))
    places["events"] = json.dumps(_events(cluster, run))
    return places


def test_a_hung_run_keeps_every_processs_stack_without_ptrace_its_flight_recorder_and_no_tracker_key(
    real_cluster: SimulatedCluster, platform: dict[str, Any]
) -> None:
    """Pods as rendered (non-root, no SYS_PTRACE; the runtime grants no ptrace): the double stalls at rollout 2 with
    its driver (on the worker pod), an actor on the head pod and that actor's subprocess (as SGLang's scheduler)
    each waiting in a named function, and a flight-recorder dump where torch writes one. A capture request's bundle
    names each function, holds the dump, and has the driver's log with the tracker key the driver and a task on
    each pod printed (as a tracker library that logs its settings would), redacted. With the worker pod's raylet
    and dashboard agent stopped (SIGSTOP from this machine: a node that no longer answers), the next capture ends
    within its budget and names that pod as missing. No ConfigMap, status or event of the run holds the key, and
    the same key as an extraArgs flag is refused by the operator. The stopped raylet may have cost the node (Ray's
    health check), so the run's end is only waited for, not judged."""
    key = f"wk-{secrets.token_hex(16)}"
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tracker", "namespace": NAMESPACE}}
    real_cluster.kubectl("apply", "-f", "-", input=json.dumps({**secret, "stringData": {"api-key": key}}))
    spec = {
        "secretEnv": [{"name": "WANDB_API_KEY", "secretKeyRef": {"name": "tracker", "key": "api-key"}}],
        "guards": {"stallTimeoutSeconds": 1800, "startupGraceSeconds": 0},
    }
    knobs = ["--fake-step-seconds", "2", "--fake-stall-after", "2", "--fake-hang-frames"]
    run = start(real_cluster, platform, run_manifest("real-stacks", rollouts=40, spec=spec), [*knobs, *PRINT_KEY])
    wait_for("rollout 1 scraped", _rollout(real_cluster, run, 1), lambda: status(real_cluster, run))
    # The double reaches its frames a few seconds after rollout 1: ask again until a bundle has them all.
    for n in range(8):
        pieces = _capture(real_cluster, run, f"hung-{n}")
        if all(f in pieces.get("stacks.txt", "") for f in FRAMES):
            break
    said = pieces.get("stacks.txt", "")[-6000:], pieces.get("missing.txt")
    assert all(f in pieces["stacks.txt"] for f in FRAMES), said
    assert "missing.txt" not in pieces and "py-spy" not in pieces["stacks.txt"], said
    assert [k for k in pieces if k.startswith("nccl-") and "nccl_trace_rank_0" in k], sorted(pieces)
    [head], [worker] = pods(real_cluster, run, "ray-head"), pods(real_cluster, run, "ray-worker")
    for pod in (head, worker):  # the variable reached both pods, and the bundle holds it redacted
        assert f"WANDB_API_KEY=<redacted> on {pod['metadata']['name']}" in pieces["driver.log"], pieces["driver.log"]
    # One Ray pod that no longer answers: the capture ends within its budget and names what it could not get.
    stopped = _raylet_and_agent(worker)
    assert len(stopped) >= 2, stopped  # the raylet and at least the dashboard agent
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    try:
        partial = _capture(real_cluster, run, "worker-stopped")
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
    assert FRAMES[1] in partial["stacks.txt"], partial["stacks.txt"][-6000:]  # the head's actor, still read
    assert f"node {worker['metadata']['name']}-" in partial["missing.txt"], partial["missing.txt"]
    took = float(partial["index.txt"].split("capture_seconds: ")[1].split()[0])
    assert took <= CAPTURE_BUDGET_SECONDS, partial["index.txt"]
    # The same key as a flag: refused by the operator, quoted nowhere.
    flagged = run_manifest("real-flag", rollouts=2, spec={"extraArgs": ["--wandb-key", key]})
    real_cluster.kubectl("apply", "-f", "-", input=json.dumps(flagged))
    refused = wait_for(
        "Failed/InvalidSpec", phase_is(real_cluster, "real-flag", "Failed"), lambda: status(real_cluster, "real-flag")
    )
    assert refused["reason"] == "InvalidSpec" and "secretEnv" in refused["message"], refused
    real_cluster.kubectl("patch", "grporun", run, "-n", NAMESPACE, "--type=merge", "-p", STALL_SOON)
    wait_for("the run ended", phase_is(real_cluster, run, "Failed", "Succeeded"), lambda: status(real_cluster, run))
    leaks = [w for r in (run, "real-flag") for w, text in _written_for(real_cluster, r).items() if key in text]
    assert leaks == [], leaks
    delete_run(real_cluster, "real-flag")
    delete_run(real_cluster, run)
    real_cluster.kubectl("delete", "secret", "tracker", "-n", NAMESPACE)


PRINT_KEY = ["--fake-print-env", "WANDB_API_KEY"]
STALL_SOON = json.dumps({"spec": {"guards": {"stallTimeoutSeconds": 30}}})
