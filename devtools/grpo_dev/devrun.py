"""`make run`: the operator on a simulated GPU cluster and a local Ray head, with the quickstart applied.

Starts the real kube-apiserver and etcd with the CRDs installed, kube-scheduler, kwok nodes shaped like EKS
GPU and CPU node groups and the real KubeRay operator (grpo_dev.localcluster.SimulatedCluster), a real Ray
head on loopback (grpo_dev.localray), and the operator against both; creates the quickstart's prerequisite
(the `fsx-claim` PVC), applies examples/quickstart.yaml and prints `kubectl get grporuns` every few seconds.
The kubeconfig goes to .grpo/kubeconfig. Ctrl-C stops everything and leaves no process behind.

KubeRay creates the head and worker pods, kube-scheduler places them (head on the CPU pool, the worker on a
GPU node), kwok marks them Running and Ready and KubeRay marks the RayCluster ready, so the quickstart goes
Pending -> Provisioning -> (ready) and its Ray job is submitted to the local Ray head. That head has no
trainer image, so the real job fails at once (its own words end up in the run's status, printed under the
table); `GRPO_DEMO=1 make run` runs a stand-in for miles (grpo_dev/fake_miles.py) instead, so the whole loop
can be watched to Succeeded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from grpo_operator.render import names

from grpo_dev.localcluster import SimulatedCluster, tool_path
from grpo_dev.localray import LocalRayHead

REPO = Path(__file__).resolve().parents[2]
KUBECONFIG = REPO / ".grpo" / "kubeconfig"
QUICKSTART = REPO / "examples" / "quickstart.yaml"
FAKE_MILES = Path(__file__).with_name("fake_miles.py")


def _say(line: str) -> None:
    print(f"[make run] {line}", flush=True)


def _kuberay_ready(plane: SimulatedCluster, run: str) -> bool:
    """KubeRay (not this script) reports the head and the worker ready."""
    found = plane.kubectl("get", "raycluster", names.ray_cluster(run), "-o", "json", check=False)
    status = json.loads(found.stdout).get("status", {}) if found.returncode == 0 else {}
    return bool(status.get("state") == "ready" and status.get("readyWorkerReplicas"))


@contextmanager
def _operator(env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """The operator in its own session (Ctrl-C reaches us, not it), stopped before what it talks to."""
    process = subprocess.Popen(
        [sys.executable, "-m", "grpo_operator", "--standalone", "--all-namespaces"], env=env, start_new_session=True
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
                    "efaDevices": 0,
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


def main() -> int:
    demo = os.environ.get("GRPO_DEMO") == "1"
    KUBECONFIG.parent.mkdir(exist_ok=True)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        with SimulatedCluster(kubeconfig=KUBECONFIG, report=_say) as plane, LocalRayHead() as head:
            _say(f"Ray head: {head.dashboard_url}")
            env = {
                **os.environ,
                "KUBECONFIG": str(plane.kubeconfig),
                "GRPO_RAY_ADDRESS": head.dashboard_url,
                "GRPO_RECONCILE_INTERVAL_SECONDS": "3",
            }
            env.pop("GRPO_DEMO", None)
            if demo:  # the real trainer launcher around the stand-in, so the run's end is read from its summary
                env["GRPO_ENTRYPOINT_PREFIX"] = json.dumps(_demo_prefix())
            with _operator(env) as operator:
                quickstart = QUICKSTART.read_text()
                plane.provide_claim("default", "fsx-claim")
                # The local head runs with token auth on: the run takes its token from a Secret made first
                # (bring your own token), as the operator's own Secret would give it on a cluster.
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
                plane.kubectl("apply", "-f", "-", input=quickstart)
                applied = time.monotonic()
                kubectl = tool_path("kubectl")
                _say(f"from another shell: export KUBECONFIG={plane.kubeconfig}; {kubectl} get grporuns -w")
                _say("Ctrl-C stops everything")
                last, ready = "", False
                while operator.poll() is None:
                    if not ready and _kuberay_ready(plane, "quickstart"):
                        ready = True
                        _say(
                            f"KubeRay made RayCluster {names.ray_cluster('quickstart')} ready "
                            f"{time.monotonic() - applied:.0f}s after kubectl apply"
                        )
                    table = plane.kubectl("get", "grporuns", check=False).stdout
                    if table.split()[:-1] != last.split()[:-1]:  # print on change (AGE aside)
                        print(table, flush=True)
                        last = table
                        message = plane.kubectl(
                            "get", "grporun", "quickstart", "-o", "jsonpath={.status.message}", check=False
                        ).stdout
                        if message:
                            _say(f"quickstart: {message}")
                    time.sleep(3)
                _say(f"the operator exited with code {operator.returncode}")
                return 1
    except KeyboardInterrupt:
        _say("stopped; nothing is left running")
        return 0


if __name__ == "__main__":
    sys.exit(main())
