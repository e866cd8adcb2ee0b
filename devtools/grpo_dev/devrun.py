"""`make run`: the operator on a simulated GPU cluster and a local Ray head, with the quickstart applied.

Starts the real kube-apiserver and etcd with the CRDs installed, kube-scheduler, kwok nodes shaped like EKS
GPU and CPU node groups and the real KubeRay operator (grpo_dev.localcluster.SimulatedCluster), a real Ray
head on loopback (grpo_dev.localray), and the operator against both; creates the quickstart's prerequisite
(the `fsx-claim` PVC), applies examples/quickstart.yaml and prints `kubectl get grporuns` when it changes, with
the run's message. KubeRay creates the head and worker pods, kube-scheduler places them, kwok marks them Running
and KubeRay marks the RayCluster ready, so the run's Ray job is submitted to the local Ray head. The trainer
there is the miles stand-in (grpo_dev/fake_miles.py, inside the real trainer launcher) where this machine has
no GPU, which the first lines say, and the rendered miles entrypoint where it has one (`GRPO_TRAINER=standin`
or `miles` chooses). The terminal shows only the table and the run's messages: the operator's log and the
daemons' go to .grpo/logs/ (the Ray head's are copied there on stop), the kubeconfig to .grpo/kubeconfig.
Ctrl-C stops everything and leaves no process behind.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from grpo_operator.render import names

from grpo_dev.localcluster import SimulatedCluster, realplatform, tool_path
from grpo_dev.localcluster.realnode import RealNodeUnavailable, ensure_host_tools
from grpo_dev.localcluster.simcluster import cpu_node
from grpo_dev.localray import LocalRayHead

REPO = Path(__file__).resolve().parents[2]
KUBECONFIG = REPO / ".grpo" / "kubeconfig"
QUICKSTART = REPO / "examples" / "quickstart.yaml"
LOGS = KUBECONFIG.parent / "logs"
FAKE_MILES = Path(__file__).with_name("fake_miles.py")
TRAINERS = ("standin", "miles")
REAL_NAMESPACE = "grpo-demo"


def _say(line: str) -> None:
    print(f"[make run] {line}", flush=True)


def _kuberay_ready(plane: SimulatedCluster, run: str, namespace: str) -> bool:
    """KubeRay (not this script) reports the head and the worker ready."""
    found = plane.kubectl("get", "raycluster", names.ray_cluster(run), "-n", namespace, "-o", "json", check=False)
    status = json.loads(found.stdout).get("status", {}) if found.returncode == 0 else {}
    return bool(status.get("state") == "ready" and status.get("readyWorkerReplicas"))


def _has_gpu() -> bool:
    """An NVIDIA GPU the driver lists (`nvidia-smi -L`), as miles needs one."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return listed.returncode == 0 and "GPU" in listed.stdout


def _trainer() -> str | None:
    """`standin` or `miles`: GRPO_TRAINER when set, else by whether a GPU is here; None (said) when invalid."""
    chosen = os.environ.get("GRPO_TRAINER", "")
    if chosen and chosen not in TRAINERS:
        _say(f"GRPO_TRAINER={chosen!r} is not one of {', '.join(TRAINERS)}: unset it, or set it to one of them")
        return None
    return chosen or ("miles" if _has_gpu() else "standin")


@contextmanager
def _operator(env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The operator in its own session (Ctrl-C reaches us, not it), its output in `log`, stopped before what
    it talks to."""
    with log.open("ab") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "grpo_operator", "--standalone", "--all-namespaces"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def _demo_prefix() -> list[str]:
    """grpo_launcher (no preflight: no GPU here; a minimal run config) wrapping the miles stand-in."""
    config = KUBECONFIG.parent / "demo-run-config.json"
    config.write_text(
        json.dumps(
            {
                "apiVersion": "grpo.dev/v1alpha1",
                "kind": "RunConfig",
                "run": {"name": "quickstart", "namespace": "default"},
                "preflight": {
                    "gpus": 0,
                    "minFreeGpuMemoryGiB": 0.0,
                    "shmMinGiB": 0.0,
                    "fabric": {"type": "efa", "devices": 0},
                    "gdrcopy": False,
                    "checkpointDir": str(KUBECONFIG.parent / "checkpoints"),
                    "checkpointGiB": 0.0,
                    "metricsPort": 0,
                },
            }
        )
    )
    return [
        sys.executable,
        "-m",
        "grpo_launcher",
        "run",
        "--config",
        str(config),
        "--skip-preflight",
        "--",
        sys.executable,
        str(FAKE_MILES),
        # The demo's one run: knobs here, since spec.extraArgs takes only miles's own flags.
        "--fake-step-seconds",
        "2",
        "--fake-reward",
        "0.5",
    ]


def _keep_ray_logs(head: LocalRayHead) -> None:
    """Copy the Ray head's logs under .grpo/logs/ray before the head (and its temp dir) goes."""
    target = LOGS / "ray"
    shutil.rmtree(target, ignore_errors=True)
    try:
        shutil.copytree(head.temp_dir / "session_latest" / "logs", target, ignore_dangling_symlinks=True)
        shutil.copy2(head.log_path(), target / head.log_path().name)
    except OSError as exc:
        _say(f"the Ray head's logs could not be kept: {exc}")


def main() -> int:
    real_node = os.environ.get("GRPO_REAL_NODE") == "1"
    trainer = "standin" if real_node else _trainer()
    if trainer is None:
        return 2
    if real_node:
        problem = _real_node_problem()
        if problem:
            _say(f"GRPO_REAL_NODE=1: this machine cannot run a real node: {problem}")
            return 2
        _say("GRPO_REAL_NODE=1: the run's pods run for real on a kubelet node of this machine, from our images; the")
        _say(
            "GPU is played (a stand-in libcuda, torch and nvidia-smi) and the trainer is the miles stand-in, not miles"
        )
    elif trainer == "standin":
        _say(f"no GPU on this machine: the run's trainer is the miles stand-in ({FAKE_MILES.relative_to(REPO)}),")
        _say("not miles; its rollouts, rewards and checkpoints are made up. GRPO_TRAINER=miles runs miles instead.")
    else:
        _say("the run's trainer is miles (the rendered entrypoint) on the local Ray head, whose Python must have")
        _say("miles and the trainer launcher installed. GRPO_TRAINER=standin runs the stand-in instead.")
    KUBECONFIG.parent.mkdir(exist_ok=True)
    shutil.rmtree(LOGS, ignore_errors=True)
    LOGS.mkdir()
    _say(f"logs (the operator, the control plane, KubeRay; the Ray head's on stop): {LOGS.relative_to(REPO)}/")
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        with ExitStack() as stack:
            if real_node:
                return _real_node_run(stack)
            plane = stack.enter_context(SimulatedCluster(kubeconfig=KUBECONFIG, report=_say, log_dir=LOGS))
            head = stack.enter_context(LocalRayHead())
            stack.callback(_keep_ray_logs, head)  # runs before the head stops
            _say(f"Ray head: {head.dashboard_url}")
            env = {
                **os.environ,
                "KUBECONFIG": str(plane.kubeconfig),
                "GRPO_RAY_ADDRESS": head.dashboard_url,
                "GRPO_RECONCILE_INTERVAL_SECONDS": "3",
            }
            env.pop("GRPO_TRAINER", None)
            if trainer == "standin":  # the real trainer launcher around the stand-in: the run's end is its summary
                env["GRPO_ENTRYPOINT_PREFIX"] = json.dumps(_demo_prefix())
            operator = stack.enter_context(_operator(env, LOGS / "operator.log"))
            _apply_quickstart(plane, head)
            _follow(plane, "quickstart", "default", operator.poll)
            _say(f"the operator exited with code {operator.returncode}; its log: {LOGS.relative_to(REPO)}/operator.log")
            return 1
    except KeyboardInterrupt:
        _say("stopped; nothing is left running")
        return 0


def _real_node_problem() -> str | None:
    """Why this machine cannot run the real node (not root, tools missing and not installable), or None."""
    if os.geteuid() != 0:
        return "it needs root (containerd, iptables, a bridge)"
    try:
        ensure_host_tools(install=True, report=_say)
    except RealNodeUnavailable as exc:
        return str(exc)
    return None


def _real_node_run(stack: ExitStack) -> int:
    """The quickstart-like run on real pods: the operator as a pod installed by its chart, the node's GRPORuntime,
    KubeRay's head and worker pods from our images (grpo_dev.localcluster.realplatform)."""
    plane = stack.enter_context(
        SimulatedCluster(kubeconfig=KUBECONFIG, report=_say, log_dir=LOGS, nodes=[cpu_node("cpu-0")], real_node=True)
    )
    _say("building our images and the dev layers (cached after the first time), importing them into the node")
    realplatform.import_images(plane)
    platform = realplatform.install(plane, REAL_NAMESPACE, reconcile_seconds=3)
    stack.callback(_keep_operator_log, plane)  # runs before the cluster stops
    _say(f"the operator runs as a pod: kubectl -n {realplatform.OPERATOR_NAMESPACE} get pods")
    run = realplatform.run_manifest("quickstart", REAL_NAMESPACE, rollouts=20)
    realplatform.start(plane, platform, run, ["--fake-step-seconds", "2"])
    code = _follow(plane, "quickstart", REAL_NAMESPACE, lambda: realplatform.operator_crash(plane.kubectl))
    _say(f"the operator pod keeps exiting (its last exit code {code}); its log: {LOGS.relative_to(REPO)}/operator.log")
    return 1


def _keep_operator_log(plane: SimulatedCluster) -> None:
    (LOGS / "operator.log").write_text(realplatform.operator_log(plane))


def _apply_quickstart(plane: SimulatedCluster, head: LocalRayHead) -> None:
    plane.provide_claim("default", "fsx-claim")
    # The local head runs with token auth on: the run takes its token from a Secret made first (bring your own
    # token), as the operator's own Secret would give it on a cluster.
    plane.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": names.ray_auth_secret("quickstart")},
                "stringData": {names.AUTH_TOKEN_KEY: head.auth_token},
            }
        ),
    )
    plane.kubectl("apply", "-f", "-", input=QUICKSTART.read_text())


def _follow(plane: SimulatedCluster, run: str, namespace: str, ended: Callable[[], int | None]) -> int:
    """Print the namespace's `kubectl get grporuns` and the run's message as they change, until `ended()` gives
    the operator's exit code, which it returns (Ctrl-C ends it otherwise)."""
    applied = time.monotonic()
    _say(
        f"from another shell: export KUBECONFIG={plane.kubeconfig}; {tool_path('kubectl')} -n {namespace} get grporuns -w"
    )
    _say("Ctrl-C stops everything")
    last, ready = "", False
    while (code := ended()) is None:
        if not ready and _kuberay_ready(plane, run, namespace):
            ready = True
            _say(
                f"KubeRay made RayCluster {names.ray_cluster(run)} ready "
                f"{time.monotonic() - applied:.0f}s after kubectl apply"
            )
        table = plane.kubectl("get", "grporuns", "-n", namespace, check=False).stdout
        if table.split()[:-1] != last.split()[:-1]:  # print on change (AGE aside)
            print(table, flush=True)
            last = table
            message = plane.kubectl(
                "get", "grporun", run, "-n", namespace, "-o", "jsonpath={.status.message}", check=False
            ).stdout
            if message:
                _say(f"{run}: {message}")
        time.sleep(3)
    return code


if __name__ == "__main__":
    sys.exit(main())
