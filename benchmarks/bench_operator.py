"""Benchmark of the operator with many runs on the real local API server, against a bare kopf operator.

    .venv/bin/python benchmarks/bench_operator.py [--sizes 10,100,500] [--window 60]   (`make bench-operator`)

For each N, in a fresh namespace of one real control plane (grpo_dev.localcluster.ControlPlane: etcd,
kube-apiserver, kube-controller-manager), first the baseline, then the operator:

- the process is started (`python -m grpo_operator --standalone --namespace NS`, as tests/support/operator_harness.py
  starts it, with the default 15 s reconcile interval; the baseline is benchmarks/bare_kopf_operator.py under
  `kopf run`), and one warm-up run shows its watch is up;
- N GRPORuns (examples/quickstart.yaml) are created at once from 8 client threads; "apply -> children" is from
  the create's response to this process's watch seeing the run's RayCluster (the baseline: its ConfigMap);
- after a settle time (five intervals: past every run's first resync) a steady window: API requests from kube-apiserver's own /metrics
  (`apiserver_request_total`, every verb but WATCH, on the namespaced resources an operator touches; the
  metric has no user-agent label, so the same window is measured with no operator at all and subtracted),
  the operator's CPU (utime+stime from /proc) and RSS (VmRSS; VmHWM is the peak);
- KubeRay is played by status patches (what KubeRay v1.5.0 writes once the head and workers are ready, as
  tests/support/operator_harness.py play_kuberay_ready): 5 runs first, polled with the real `kubectl get` until their
  status says Submitting ("status change -> kubectl get"); then every other run, watched ("ready ->
  Submitting"). The Ray Jobs address is a closed loopback port, so a run stays Submitting (Ray unreachable),
  which is also the state where per-run backoff shows in the request rate.

Every wait has a cap; a run not done by then is counted and said. The machine's load is printed before/after.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from grpo_dev.localcluster import ControlPlane
from grpo_operator.render import names as child_names
from kubernetes import client, watch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.operator.harness import free_port, manifest  # noqa: E402

INTERVAL = 15.0
SAMPLE = 5
RESOURCES = {
    "grporuns",
    "rayclusters",
    "pods",
    "secrets",
    "services",
    "configmaps",
    "deployments",
    "events",
    "networkpolicies",
    "replicasets",
    "serviceaccounts",
    "leases",
    "kopfpeerings",
}
READY_STATUS_CONDITIONS = (
    ("RayClusterProvisioned", "AllPodRunningAndReadyFirstTime"),
    ("HeadPodReady", "HeadPodRunningAndReady"),
)


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]  # nearest rank


def fmt(value: float | None, unit: str = "s") -> str:
    if value is None:
        return "-"
    return f"{value:.2f}{unit}" if unit == "s" else f"{value:.0f}{unit}"


def load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


# --- what the API server counts --------------------------------------------------------------------------

LINE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")


def api_requests_by(plane: ControlPlane) -> dict[str, float]:
    """The API server's request counters so far, by "VERB resource[/subresource]"."""
    text = plane.kubectl("get", "--raw", "/metrics").stdout
    counts: dict[str, float] = {}
    for line in text.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group("labels")))
        if labels.get("verb") in ("WATCH", "WATCHLIST", "CONNECT") or labels.get("resource") not in RESOURCES:
            continue
        what = f"{labels.get('verb')} {labels['resource']}" + (
            f"/{labels['subresource']}" if labels.get("subresource") else ""
        )
        counts[what] = counts.get(what, 0.0) + float(m.group("value"))
    return counts


def api_requests(plane: ControlPlane) -> float:
    return sum(api_requests_by(plane).values())


# --- the process under test ----------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_mib(pid: int) -> tuple[float, float]:
    info = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(info["VmRSS"].split()[0]) / 1024, int(info["VmHWM"].split()[0]) / 1024


@contextmanager
def process(design: str, plane: ControlPlane, namespace: str, logdir: Path, env: dict[str, str]) -> Iterator[int]:
    full = {**os.environ, "KUBECONFIG": str(plane.kubeconfig), "GRPO_RECONCILE_INTERVAL_SECONDS": str(INTERVAL), **env}
    if design == "baseline":
        argv = [
            sys.executable,
            "-m",
            "kopf",
            "run",
            "--standalone",
            "--namespace",
            namespace,
            str(REPO / "benchmarks" / "bare_kopf_operator.py"),
        ]
    else:
        full.update(
            {
                "GRPO_RAY_ADDRESS": f"http://127.0.0.1:{free_port()}",  # closed: Ray stays unreachable
                "GRPO_PROMETHEUS_PORT": str(free_port()),
                "GRPO_METRICS_PORT": "0",
                "GRPO_HTTP_TIMEOUT_SECONDS": "2",
            }
        )
        argv = [sys.executable, "-m", "grpo_operator", "--standalone", "--namespace", namespace]
    with (logdir / f"{design}.log").open("wb") as log:
        proc = subprocess.Popen(argv, env=full, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=REPO)
    try:
        yield proc.pid
    finally:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# --- watching what the operator does --------------------------------------------------------------------


@dataclass
class Seen:
    """When this process's watches first saw each thing (monotonic seconds)."""

    child: dict[str, float] = field(default_factory=dict)
    submitting: dict[str, float] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)


def _watch(
    list_call: Callable[..., Any], on_event: Callable[[dict[str, Any]], None], stop: threading.Event, **kwargs: Any
) -> None:
    while not stop.is_set():
        w = watch.Watch()
        with suppress(Exception):  # a dropped or expired watch is simply opened again
            for event in w.stream(list_call, timeout_seconds=5, **kwargs):
                obj = event["object"]
                on_event(obj if isinstance(obj, dict) else client.ApiClient().sanitize_for_serialization(obj))
                if stop.is_set():
                    break


def start_watches(api: client.ApiClient, namespace: str, design: str, seen: Seen) -> list[threading.Thread]:
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)

    def on_child(obj: dict[str, Any]) -> None:
        labels = obj["metadata"].get("labels") or {}
        run = labels.get("bench.grpo.dev/run") or labels.get("grpo.dev/run")
        if run:
            seen.child.setdefault(run, time.monotonic())

    def on_run(obj: dict[str, Any]) -> None:
        if (obj.get("status") or {}).get("reason") == "Submitting":
            seen.submitting.setdefault(obj["metadata"]["name"], time.monotonic())

    if design == "baseline":
        child: tuple[Callable[..., Any], dict[str, Any]] = (
            core.list_namespaced_config_map,
            {"namespace": namespace, "label_selector": "bench.grpo.dev/run"},
        )
    else:
        child = (
            custom.list_namespaced_custom_object,
            {"group": "ray.io", "version": "v1", "namespace": namespace, "plural": "rayclusters"},
        )
    targets = [
        (child[0], on_child, child[1]),
        (
            custom.list_namespaced_custom_object,
            on_run,
            {"group": "grpo.dev", "version": "v1alpha1", "namespace": namespace, "plural": "grporuns"},
        ),
    ]
    threads = [
        threading.Thread(target=_watch, args=(call, fn, seen.stop), kwargs=kw, daemon=True) for call, fn, kw in targets
    ]
    for t in threads:
        t.start()
    return threads


def wait_until(done: Callable[[], bool], cap: float) -> bool:
    deadline = time.monotonic() + cap
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(0.2)
    return done()


# --- one cell ----------------------------------------------------------------------------------------------


@dataclass
class Row:
    design: str
    n: int
    children: list[float] = field(default_factory=list)
    children_missing: int = 0
    submitting: list[float] = field(default_factory=list)
    submitting_missing: int = 0
    kubectl: list[float] = field(default_factory=list)
    requests_per_run_min: float | None = None
    cpu_steady: float | None = None  # % of one core
    cpu_burst: float | None = None  # CPU seconds from the first create to the last child
    rss: float | None = None
    hwm: float | None = None
    by_request: dict[str, float] = field(
        default_factory=dict
    )  # steady window, per minute, all runs (background included)


def run_doc(name: str, namespace: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(manifest(name, namespace, ray_token=None))
    return doc


def ready_patch(custom: client.CustomObjectsApi, namespace: str, run: str) -> None:
    cluster = custom.get_namespaced_custom_object(
        "ray.io", "v1", namespace, "rayclusters", child_names.ray_cluster(run)
    )
    workers = sum(int(g.get("replicas") or 0) for g in cluster["spec"].get("workerGroupSpecs") or [])
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    conditions = [
        {"type": t, "status": "True", "reason": r, "message": "", "lastTransitionTime": now}
        for t, r in READY_STATUS_CONDITIONS
    ]
    status = {
        "state": "ready",
        "readyWorkerReplicas": workers,
        "desiredWorkerReplicas": workers,
        "conditions": conditions,
    }
    custom.patch_namespaced_custom_object_status(
        "ray.io", "v1", namespace, "rayclusters", cluster["metadata"]["name"], {"status": status}
    )


def measure(
    plane: ControlPlane,
    design: str,
    n: int,
    *,
    window: float,
    background: float,
    cap: float,
    logdir: Path,
    env: dict[str, str],
) -> Row:
    api = plane.api_client()
    custom = client.CustomObjectsApi(api)
    namespace = f"bench-{design}-{n}"
    plane.kubectl("create", "namespace", namespace)
    row = Row(design, n)
    seen = Seen()
    start_watches(api, namespace, design, seen)
    with process(design, plane, namespace, logdir, env) as pid:
        custom.create_namespaced_custom_object(
            "grpo.dev", "v1alpha1", namespace, "grporuns", run_doc("warmup", namespace)
        )
        if not wait_until(lambda: "warmup" in seen.child, 300):
            raise SystemExit(f"{design}: the warm-up run got no child in 300 s; see {logdir}/{design}.log")
        names = [f"run-{i:04d}" for i in range(n)]
        applied: dict[str, float] = {}
        cpu0, t0 = cpu_seconds(pid), time.monotonic()

        def create(name: str) -> None:
            custom.create_namespaced_custom_object(
                "grpo.dev", "v1alpha1", namespace, "grporuns", run_doc(name, namespace)
            )
            applied[name] = time.monotonic()

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create, names))
        wait_until(lambda: all(x in seen.child for x in names), cap)
        row.children = [seen.child[x] - applied[x] for x in names if x in seen.child]
        row.children_missing = n - len(row.children)
        row.cpu_burst = cpu_seconds(pid) - cpu0
        print(
            f"  {design} N={n}: children of {len(row.children)}/{n} in {time.monotonic() - t0:.0f}s; settling",
            flush=True,
        )

        # Settled: past every run's first resync (4 intervals after its create), whose one GET of the run (kopf's
        # own annotation patch after the create handler moved its resourceVersion) is not the steady state.
        time.sleep(5 * INTERVAL)
        by0, cpu0, t0 = api_requests_by(plane), cpu_seconds(pid), time.monotonic()
        time.sleep(window)
        by1, cpu1, t1 = api_requests_by(plane), cpu_seconds(pid), time.monotonic()
        minutes = (t1 - t0) / 60
        row.requests_per_run_min = max(0.0, (sum(by1.values()) - sum(by0.values())) / minutes - background) / (n + 1)
        row.by_request = {k: (v - by0.get(k, 0.0)) / minutes for k, v in by1.items() if v > by0.get(k, 0.0)}
        row.cpu_steady = 100 * (cpu1 - cpu0) / (t1 - t0)
        row.rss, row.hwm = memory_mib(pid)

        if design != "baseline":
            sample, rest = names[:SAMPLE], names[SAMPLE:]
            started = time.monotonic()
            for name in sample:
                ready_patch(custom, namespace, name)
            pending = set(sample)
            while pending and time.monotonic() - started < cap:
                got = json.loads(
                    plane.kubectl("get", "grporun", *sorted(pending), "-n", namespace, "-o", "json").stdout
                )
                now = time.monotonic()
                for item in got.get("items", [got]):  # one name: the object itself, not a List
                    name, reason = item["metadata"]["name"], (item.get("status") or {}).get("reason")
                    if reason == "Submitting" and name in pending:
                        pending.discard(name)
                        row.kubectl.append(now - started)
            ready: dict[str, float] = {}

            def play(name: str) -> None:
                ready_patch(custom, namespace, name)
                ready[name] = time.monotonic()

            with ThreadPoolExecutor(8) as pool:
                list(pool.map(play, rest))
            wait_until(lambda: all(x in seen.submitting for x in rest), cap)
            row.submitting = [seen.submitting[x] - ready[x] for x in rest if x in seen.submitting]
            row.submitting_missing = len(rest) - len(row.submitting)
        seen.stop.set()
        # Deleted while the process still runs, and gone before the next cell: its finalizers on the runs come off
        # (a namespace left with them stays Terminating, and the namespace controller's retries on it, LIST and
        # DELETE of events, pods, Secrets, ..., would count in every later cell's steady window).
        done = plane.kubectl("delete", "namespace", namespace, "--wait=true", "--timeout=600s", check=False)
        if done.returncode != 0:
            print(f"  {design} N={n}: namespace {namespace} not gone in 600 s: {done.stderr.strip()}", flush=True)
    return row


def table(rows: list[Row]) -> str:
    head = (
        "design",
        "N",
        "apply->children p50/p99",
        "ready->Submitting p50/p99",
        "kubectl get p50/max",
        "API req/run/min",
        "CPU steady",
        "CPU s burst",
        "RSS (peak) MiB",
    )
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for r in rows:
        miss = f" ({r.children_missing} missing)" if r.children_missing else ""
        smiss = f" ({r.submitting_missing} missing)" if r.submitting_missing else ""
        lines.append(
            " | ".join(
                [
                    r.design,
                    str(r.n),
                    f"{fmt(pct(r.children, 50))} / {fmt(pct(r.children, 99))}{miss}",
                    f"{fmt(pct(r.submitting, 50))} / {fmt(pct(r.submitting, 99))}{smiss}"
                    if r.design != "baseline"
                    else "-",
                    f"{fmt(pct(r.kubectl, 50))} / {fmt(max(r.kubectl) if r.kubectl else None)}"
                    if r.design != "baseline"
                    else "-",
                    f"{r.requests_per_run_min:.2f}" if r.requests_per_run_min is not None else "-",
                    f"{r.cpu_steady:.0f}%" if r.cpu_steady is not None else "-",
                    f"{r.cpu_burst:.1f}" if r.cpu_burst is not None else "-",
                    f"{r.rss:.0f} ({r.hwm:.0f})" if r.rss is not None and r.hwm is not None else "-",
                ]
            )
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,500", help="comma-separated N (default 10,100,500)")
    parser.add_argument("--window", type=float, default=60.0, help="steady-state window in seconds (default 60)")
    parser.add_argument("--cap", type=float, default=300.0, help="the most a wait may take, in seconds (default 300)")
    parser.add_argument("--designs", default="baseline,operator", help="which to run (default baseline,operator)")
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",") if x]
    designs = [x for x in args.designs.split(",") if x]
    print(
        f"operator benchmark: N = {sizes}, window {args.window:.0f}s, {os.cpu_count()} CPUs; before: {load()}",
        flush=True,
    )
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="bench-operator-") as tmp, ControlPlane() as plane:
        r0, t0 = api_requests(plane), time.monotonic()
        time.sleep(min(args.window, 30))
        background = (api_requests(plane) - r0) / ((time.monotonic() - t0) / 60)
        print(f"  background (no operator): {background:.1f} requests/min", flush=True)
        for n in sizes:
            for design in designs:
                logdir = Path(tmp) / f"{design}-{n}"
                logdir.mkdir()
                rows.append(
                    measure(
                        plane, design, n, window=args.window, background=background, cap=args.cap, logdir=logdir, env={}
                    )
                )
                print(table(rows[-1:]).splitlines()[-1], flush=True)
    print(f"after: {load()}")
    print(table(rows))
    for r in rows:
        top = sorted(r.by_request.items(), key=lambda kv: -kv[1])[:8]
        said = ", ".join(f"{k} {v:.1f}" for k, v in top) or "none"
        print(f"steady requests/min, {r.design} N={r.n} (background {background:.1f}/min included): {said}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
