"""A real Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver and kube-controller-manager.

This module owns `ControlPlane`, the context manager that tests and `make run` use to get an API server
that enforces what a cluster enforces (CRD schemas and CEL rules, pruning, printer columns, server-side
apply and dry-run, authentication, RBAC, ServiceAccount tokens, owner-reference garbage collection and
namespace deletion). It starts the daemons on free loopback ports with a fresh PKI, waits for `/readyz`,
writes an admin kubeconfig, installs the repository's `crds/` and the pinned KubeRay CRDs with
server-side apply, and tears everything down on exit, on an exception, on SIGINT/SIGTERM and at
interpreter exit.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from kubernetes import config as kube_config

from grpo_dev.localcluster import pki as pkimod
from grpo_dev.localcluster.build import kuberay_crd_dir, tool_path
from grpo_dev.localcluster.processes import ManagedProcess, terminate_on_signals

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

REPO_CRD_DIR = Path(__file__).resolve().parents[3] / "crds"
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
WORKDIR_PREFIX = "grpo-controlplane-"


class ControlPlaneError(RuntimeError):
    """The control plane failed to start or a command against it failed; the message has the details."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _remove_orphaned_workdirs() -> None:
    """Delete work directories left by owners that were SIGKILLed (their daemons died with them)."""
    for workdir in Path(tempfile.gettempdir()).glob(f"{WORKDIR_PREFIX}*"):
        try:
            owner = int((workdir / "owner.pid").read_text())
        except (OSError, ValueError):
            continue
        if not Path(f"/proc/{owner}").exists():
            shutil.rmtree(workdir, ignore_errors=True)


def _quiet(_: str) -> None:
    return None


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager (+ optional kube-scheduler) for one session.

    Use as `with ControlPlane() as cp: cp.kubectl("get", "ns")`. Attributes after start: `kubeconfig`
    (admin, `system:masters`), `server` (https URL), `workdir` (logs and PKI; removed on stop).
    """

    def __init__(
        self,
        *,
        kubeconfig: Path | None = None,
        crd_dirs: Sequence[Path] | None = None,
        kuberay_crds: bool = True,
        scheduler: bool = False,
        advertise_address: str | None = None,
        start_timeout: float = 180.0,
        report: Callable[[str], None] = _quiet,
        log_dir: Path | None = None,
    ) -> None:
        self._requested_kubeconfig = kubeconfig
        # Where the daemons' logs go when they must outlive the session (`make run`); else the workdir.
        self._log_dir = log_dir
        # Where pods reach the API server (the real node's bridge gateway): kube-apiserver listens there instead
        # of on 127.0.0.1 and the `kubernetes` Service's endpoints name it.
        self._advertise = advertise_address
        self._crd_dirs = list(crd_dirs) if crd_dirs is not None else [REPO_CRD_DIR]
        self._kuberay_crds = kuberay_crds
        self._scheduler = scheduler
        self._timeout = start_timeout
        self._report = report
        self._processes: list[ManagedProcess] = []
        self._signals: contextlib.ExitStack | None = None
        self._workdir: Path | None = None
        self._kubeconfig: Path | None = None
        self._ssl: ssl.SSLContext | None = None
        self._kubectl_bin: Path | None = None
        self.server = ""

    # --- lifecycle -----------------------------------------------------------------------------------

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def workdir(self) -> Path:
        if self._workdir is None:
            raise ControlPlaneError("the control plane is not running")
        return self._workdir

    @property
    def log_dir(self) -> Path:
        """The daemons' logs: the `log_dir` asked for (kept after stop), else `workdir/logs` (removed with it)."""
        return self._log_dir if self._log_dir is not None else self.workdir / "logs"

    @property
    def kubeconfig(self) -> Path:
        if self._kubeconfig is None:
            raise ControlPlaneError("the control plane is not running")
        return self._kubeconfig

    @property
    def pids(self) -> dict[str, int]:
        """PID of each daemon (each leads its own process group)."""
        return {p.name: p.pid for p in self._processes}

    def dead(self) -> list[str]:
        """Daemons that have exited on their own, with their last log lines (empty when all are running)."""
        return [
            f"{p.name} exited with code {p.exit_code()}:\n{p.log_tail()}" for p in self._processes if not p.running()
        ]

    def start(self) -> None:
        if self._workdir is not None:
            raise ControlPlaneError("this ControlPlane is already running")
        needed = ["etcd", "kube-apiserver", "kube-controller-manager", "kubectl"]
        needed += ["kube-scheduler"] if self._scheduler else []
        binaries = {name: tool_path(name, self._report) for name in needed}
        self._kubectl_bin = binaries["kubectl"]
        self._signals = contextlib.ExitStack()
        self._signals.enter_context(terminate_on_signals())
        _remove_orphaned_workdirs()
        for attempt in range(3):
            self._workdir = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))
            (self._workdir / "owner.pid").write_text(str(os.getpid()))
            try:
                self._start(binaries)
                return
            except ControlPlaneError as error:
                self._stop_processes()
                # a free port picked here can be taken by another program before the daemon binds it
                if "address already in use" not in str(error) or attempt == 2:
                    self.stop()
                    raise
            except BaseException:
                self.stop()
                raise

    def _start(self, binaries: dict[str, Path]) -> None:
        work = self.workdir
        started = time.monotonic()
        pki = pkimod.generate(work / "pki", (self._advertise,) if self._advertise else ())
        etcd_port, peer_port, api_port = _free_port(), _free_port(), _free_port()
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        self._launch(
            "etcd",
            [
                str(binaries["etcd"]),
                f"--data-dir={work / 'etcd'}",
                "--name=grpo-local",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=grpo-local=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync=true",
                "--quota-backend-bytes=4294967296",
                "--log-level=warn",
            ],
        )
        self._wait("etcd", lambda: self._http_ok(f"{etcd_url}/health"))

        address = self._advertise or "127.0.0.1"
        self.server = f"https://{address}:{api_port}"
        # the endpoints of `kubernetes` cannot hold a loopback address, so they are only kept where pods exist
        reconciler = "lease" if self._advertise else "none"
        self._launch(
            "kube-apiserver",
            [
                str(binaries["kube-apiserver"]),
                f"--advertise-address={address}",
                f"--bind-address={address}",
                f"--secure-port={api_port}",
                f"--cert-dir={work / 'pki'}",
                f"--tls-cert-file={pki.serving_cert}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--client-ca-file={pki.ca_cert}",
                f"--service-account-issuer={self.server}",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                f"--etcd-servers={etcd_url}",
                "--authorization-mode=Node,RBAC",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--allow-privileged=true",
                f"--endpoint-reconciler-type={reconciler}",
                f"--kubelet-client-certificate={pki.kubelet_client_cert}",
                f"--kubelet-client-key={pki.kubelet_client_key}",
                f"--kubelet-certificate-authority={pki.ca_cert}",
                # a node's Hostname address (its name) resolves nowhere here; its InternalIP is where it serves
                "--kubelet-preferred-address-types=InternalIP,Hostname",
            ],
        )
        self._ssl = ssl.create_default_context(cafile=str(pki.ca_cert))
        self._ssl.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
        self._wait("kube-apiserver /readyz", lambda: self._http_ok(f"{self.server}/readyz"))

        target = self._requested_kubeconfig or work / "admin.kubeconfig"
        self._kubeconfig = pkimod.write_kubeconfig(target, self.server, pki, pkimod.admin_user(pki))
        self._launch(
            "kube-controller-manager",
            [
                str(binaries["kube-controller-manager"]),
                f"--kubeconfig={self._kubeconfig}",
                f"--authentication-kubeconfig={self._kubeconfig}",
                f"--authorization-kubeconfig={self._kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={_free_port()}",
                "--leader-elect=false",
                "--controllers=*",
                f"--service-account-private-key-file={pki.sa_key}",
                f"--root-ca-file={pki.ca_cert}",
                "--use-service-account-credentials=false",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            ],
        )
        if self._scheduler:
            self._launch(
                "kube-scheduler",
                [
                    str(binaries["kube-scheduler"]),
                    f"--kubeconfig={self._kubeconfig}",
                    f"--authentication-kubeconfig={self._kubeconfig}",
                    f"--authorization-kubeconfig={self._kubeconfig}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={_free_port()}",
                    "--leader-elect=false",
                ],
            )
        # The ServiceAccount controller creating `default` shows kube-controller-manager is working.
        self._wait(
            "kube-controller-manager (ServiceAccount default/default)",
            lambda: self._http_ok(f"{self.server}/api/v1/namespaces/default/serviceaccounts/default"),
        )
        crd_files = [f for d in self._crd_dirs if d.is_dir() for f in sorted(d.glob("*.yaml"))]
        if self._kuberay_crds:
            crd_files += sorted(kuberay_crd_dir(self._report).glob("*.yaml"))
        self.apply_crds(crd_files)
        self._report(f"control plane ready at {self.server} in {time.monotonic() - started:.1f}s")

    def _stop_processes(self) -> None:
        try:
            for process in reversed(self._processes):
                process.stop()
        finally:
            self._processes = []
            if self._workdir is not None:
                shutil.rmtree(self._workdir, ignore_errors=True)

    def stop(self) -> None:
        """Stop every daemon (newest first), delete the work directory and the kubeconfig it wrote."""
        try:
            self._stop_processes()
        finally:
            if self._requested_kubeconfig is not None and self._kubeconfig is not None:
                self._requested_kubeconfig.unlink(missing_ok=True)
            if self._workdir is not None:
                shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
            self._kubeconfig = None
            if self._signals is not None:
                self._signals.close()
                self._signals = None

    def _launch(self, name: str, argv: list[str]) -> None:
        process = ManagedProcess(name, argv, self.log_dir / f"{name}.log")
        self._processes.append(process.start())

    def _wait(self, what: str, ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self._timeout
        while time.monotonic() < deadline:
            for process in self._processes:
                if not process.running():
                    raise ControlPlaneError(
                        f"{process.name} exited with code {process.exit_code()} while waiting for {what}; "
                        f"last log lines:\n{process.log_tail()}"
                    )
            if ready():
                return
            time.sleep(0.2)
        tails = "\n".join(f"--- {p.name}:\n{p.log_tail(15)}" for p in self._processes)
        raise ControlPlaneError(f"timed out after {self._timeout:.0f}s waiting for {what}\n{tails}")

    def _http_ok(self, url: str) -> bool:
        context = self._ssl if url.startswith("https:") else None
        try:
            with urllib.request.urlopen(url, timeout=5, context=context) as response:  # noqa: S310
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    # --- using it ------------------------------------------------------------------------------------

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run the real kubectl against this control plane as admin; raise on failure when `check`."""
        argv = [str(self._kubectl_bin or tool_path("kubectl")), f"--kubeconfig={self.kubeconfig}", *args]
        result = subprocess.run(argv, check=False, input=input, capture_output=True, text=True, timeout=300)
        if check and result.returncode != 0:
            raise ControlPlaneError(
                f"kubectl {' '.join(args)} failed with code {result.returncode}:\n{result.stderr.strip()}"
            )
        return result

    def apply_crds(self, files: Iterable[Path]) -> list[str]:
        """Server-side apply CRD YAML files and wait until each CRD is Established; return their names."""
        names: list[str] = []
        for path in files:
            out = self.kubectl(
                "apply",
                "--server-side",
                "--force-conflicts",
                "--field-manager=grpo-localcluster",
                "-o",
                "name",
                "-f",
                str(path),
            ).stdout
            names += [n.strip() for n in out.splitlines() if n.startswith("customresourcedefinition")]
        if names:
            self.kubectl("wait", "--for=condition=Established", "--timeout=120s", *names)
        return names

    def api_client(self) -> ApiClient:
        """A `kubernetes.client.ApiClient` authenticated as admin."""
        client: ApiClient = kube_config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(self.kubeconfig)
        )
        return client

    def token_kubeconfig(self, namespace: str, service_account: str, duration: str = "1h") -> Path:
        """Write a kubeconfig that authenticates with a TokenRequest token of an existing ServiceAccount."""
        token = self.kubectl(
            "create", "token", service_account, "-n", namespace, f"--duration={duration}"
        ).stdout.strip()
        ca = self.workdir / "pki" / "ca.crt"
        path = self.workdir / "tokens" / f"{namespace}.{service_account}.kubeconfig"
        return pkimod.write_kubeconfig(path, self.server, pkimod.Pki(ca.parent), {"token": token})

    def get_json(self, *args: str) -> Any:
        """`kubectl get <args> -o json`, parsed."""
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)
