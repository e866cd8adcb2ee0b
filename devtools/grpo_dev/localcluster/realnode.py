"""A real kubelet node beside the kwok nodes: containerd, runc, a CNI bridge, kube-proxy and CoreDNS.

This module owns `RealNode`, which turns this machine into one Kubernetes node of the local control plane
and takes it away again, leaving the host as it found it:

- the host: a bridge `grpo-br0` (10.245.0.1/24) made before the API server starts, because kube-apiserver
  listens on its address so that pods reach it through the `kubernetes` Service; ip_forward and
  bridge-nf-call-iptables on; FORWARD rules that drop pod traffic towards any other interface, so nothing
  a pod sends leaves the machine. Everything changed is recorded in the state directory and undone by
  `teardown`, which also runs at the next start when an owner died without it (a machine-wide lock makes
  one real node per machine).
- containerd (Debian's, with its own config, root, state and socket under the state directory) with the CRI
  setting `restrict_oom_score_adj = true` (this VM withholds CAP_SYS_RESOURCE even from root, and runc fails
  every sandbox without it), runc, and a CNI config directory of its own (the bridge plugin, host-local IPAM,
  no masquerade).
- kubelet (`failCgroupV1: false`: the host is cgroup v1; an empty resolv.conf, so pods resolve only through
  the cluster DNS), serving on the bridge address with a certificate of the control plane's CA.
- kube-proxy in iptables mode, node ports only on the bridge address.
- CoreDNS as a host process on the bridge address with the `kubernetes` plugin and no upstream, behind a
  `kube-system/kube-dns` Service (10.96.0.10) whose EndpointSlice names that address.

Images come in without a registry: `import_image` pipes `podman save --format docker-archive` into
`ctr -n k8s.io images import`; the pause image is the one `build.py` makes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import yaml

from grpo_dev.aptget import apt_install
from grpo_dev.localcluster import pki as pkimod
from grpo_dev.localcluster import versions as v
from grpo_dev.localcluster.build import PAUSE_REFERENCE, tool_path
from grpo_dev.localcluster.controlplane import ControlPlane, _free_port
from grpo_dev.localcluster.processes import ManagedProcess

BRIDGE = "grpo-br0"
GATEWAY = "10.245.0.1"
POD_SUBNET = "10.245.0.0/24"
CLUSTER_DNS = "10.96.0.10"
NODE_NAME = "grpo-real-node"
NODE_LABELS = {"grpo.dev/real-node": "true"}
RULE_COMMENT = "grpo-realnode"
STATE_DIR = Path(tempfile.gettempdir()) / "grpo-realnode"
PACKAGES = {"containerd": "containerd", "ctr": "containerd", "runc": "runc", "iptables": "iptables"}
CNI_BIN_DIR = Path("/usr/lib/cni")
CNI_PACKAGE = "containernetworking-plugins"
_SYSCTLS = ("net/ipv4/ip_forward", "net/bridge/bridge-nf-call-iptables")
# Pod traffic may stay on the bridge (pod to pod, pod to the host's bridge address) and nothing else.
_FORWARD_RULES = (
    ("-i", BRIDGE, "!", "-o", BRIDGE),
    ("-o", BRIDGE, "!", "-i", BRIDGE),
)

Report = Callable[[str], None]


class RealNodeUnavailable(RuntimeError):
    """This machine cannot run a real node (not root, not Linux, a tool missing); the message says why."""


class RealNodeError(RuntimeError):
    """The real node failed to start or to be torn down; the message has the details."""


def _quiet(_: str) -> None:
    return None


def _run(*argv: str, check: bool = True, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    result = subprocess.run(argv, input=input, capture_output=True, check=False, timeout=300)
    if check and result.returncode != 0:
        raise RealNodeError(f"`{' '.join(argv)}` failed ({result.returncode}): {result.stderr.decode().strip()}")
    return result


def ensure_host_tools(install: bool = True, report: Report = _quiet) -> None:
    """containerd, ctr, runc, iptables and the CNI plugins present; missing ones come from apt-get when
    `install` (root only), else `RealNodeUnavailable` says how to install them."""
    if os.geteuid() != 0:
        raise RealNodeUnavailable("a real node needs root (kubelet, containerd and the CNI bridge plugin run as root)")
    if not Path("/proc/sys/net/bridge").is_dir():
        raise RealNodeUnavailable("the br_netfilter kernel module is not loaded (modprobe br_netfilter)")

    def missing() -> list[str]:
        packages = {PACKAGES[tool] for tool in PACKAGES if shutil.which(tool) is None}
        return sorted(packages | ({CNI_PACKAGE} if not (CNI_BIN_DIR / "bridge").is_file() else set()))

    packages = missing()
    if packages and install and shutil.which("apt-get"):
        apt_install(packages, report)
        packages = missing()
    if packages:
        raise RealNodeUnavailable(
            f"{', '.join(packages)} not installed: apt-get install -y --no-install-recommends {' '.join(packages)}"
        )


# --- the host: bridge, sysctls, FORWARD rules, and undoing them ------------------------------------------


def _sysctl(name: str) -> Path:
    return Path("/proc/sys") / name


def _iptables_lines(binary: str, table: str) -> list[str]:
    result = _run(binary, "-w", "-t", table, "-S", check=False)
    return result.stdout.decode().splitlines() if result.returncode == 0 else []


def _remove_kube_chains() -> None:
    """Delete every rule jumping to a KUBE-* chain and every KUBE-* chain (kubelet's and kube-proxy's), in the
    IPv4 and IPv6 tables; nothing else on this machine makes chains of that name."""
    for binary in ("iptables", "ip6tables"):
        if shutil.which(binary) is None:
            continue
        for table in ("filter", "nat", "mangle"):
            lines = _iptables_lines(binary, table)
            for line in lines:
                parts = shlex.split(line)  # kube-proxy's rules carry quoted comments
                if parts[:1] == ["-A"] and not parts[1].startswith("KUBE-") and "-j" in parts:
                    target = parts[parts.index("-j") + 1]
                    if target.startswith("KUBE-"):
                        _run(binary, "-w", "-t", table, "-D", *parts[1:], check=False)
            chains = [line.split()[1] for line in lines if line.startswith("-N KUBE-")]
            for chain in chains:
                _run(binary, "-w", "-t", table, "-F", chain, check=False)
            for chain in chains:
                _run(binary, "-w", "-t", table, "-X", chain, check=False)


def _forward_rule(spec: tuple[str, ...]) -> tuple[str, ...]:
    return ("FORWARD", *spec, "-m", "comment", "--comment", RULE_COMMENT, "-j", "DROP")


def _mounts_under(prefixes: list[str]) -> list[str]:
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if any(point == p or point.startswith(p.rstrip("/") + "/") for p in prefixes):
            points.append(point)
    return sorted(set(points), key=len, reverse=True)


def _processes_mentioning(needle: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if needle.encode() in (proc / "cmdline").read_bytes():
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def _children(pid: int) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(proc.name))
    return found


def _kill_tree(pid: int) -> None:
    stack, tree = [pid], []
    while stack:
        current = stack.pop()
        tree.append(current)
        stack += _children(current)
    for member in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(Path(f"/proc/{m}").exists() for m in tree):
        time.sleep(0.1)


def _netns_names() -> set[str]:
    directory = Path("/run/netns")
    return {p.name for p in directory.iterdir() if p.name.startswith("cni-")} if directory.is_dir() else set()


def _remove_cgroups() -> None:
    """kubelet's cgroup trees (`/kubepods` in each v1 hierarchy, or the unified one), deepest first."""
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        root = hierarchy / "kubepods"
        if not root.is_dir():
            continue
        for directory in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                directory.rmdir()
        with contextlib.suppress(OSError):
            root.rmdir()


def teardown(state: Path = STATE_DIR) -> list[str]:
    """Undo everything a real node did on this host, by what its state directory recorded; return what could
    not be undone (empty when the host is clean). Idempotent; the caller holds the machine-wide lock."""
    for spec in _FORWARD_RULES:
        while _run("iptables", "-w", "-D", *_forward_rule(spec), check=False).returncode == 0:
            pass
    # pod containers: the shims (which outlive containerd by design) and everything under them
    socket = str(state / "containerd" / "containerd.sock")
    for pid in _processes_mentioning(socket):
        _kill_tree(pid)
    # kubelet, kube-proxy, CoreDNS and containerd of an owner that died: they run with the state dir in argv
    for pid in _processes_mentioning(str(state) + "/"):
        _kill_tree(pid)
    before_path = state / "netns-before.json"
    before = set(json.loads(before_path.read_text())) if before_path.is_file() else _netns_names()
    ours = sorted(_netns_names() - before)
    for point in _mounts_under([str(state)] + [f"/run/netns/{name}" for name in ours]):
        _run("umount", "--lazy", point, check=False)
    for name in ours:
        with contextlib.suppress(OSError):
            (Path("/run/netns") / name).unlink()
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        _run("ip", "link", "delete", BRIDGE, check=False)
    _remove_kube_chains()
    _remove_cgroups()
    saved = state / "sysctl.json"
    if saved.is_file():
        for name, value in json.loads(saved.read_text()).items():
            with contextlib.suppress(OSError):
                _sysctl(name).write_text(value)
    problems = leftovers(state)
    if not any(p.startswith("mount") for p in problems):
        shutil.rmtree(state, ignore_errors=True)
    return problems


def leftovers(state: Path = STATE_DIR) -> list[str]:
    """What of a real node is still on this host: processes, mounts, the bridge, iptables rules and chains."""
    found = [f"process {pid}" for pid in _processes_mentioning(str(state) + "/")]
    found += [f"mount {point}" for point in _mounts_under([str(state)])]
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        found.append(f"bridge {BRIDGE}")
    for binary in ("iptables", "ip6tables"):
        if shutil.which(binary) is None:
            continue
        for table in ("filter", "nat", "mangle"):
            found += [
                f"{binary} -t {table} {line}"
                for line in _iptables_lines(binary, table)
                if "KUBE-" in line or RULE_COMMENT in line or BRIDGE in line
            ]
    return found


def _remove_dead_node_locked(state: Path) -> list[str]:
    return teardown(state) if state.exists() or Path(f"/sys/class/net/{BRIDGE}").exists() else []


def remove_dead_node(state: Path = STATE_DIR) -> list[str]:
    """What `prepare_host` does first, on its own: under the machine-wide lock (so never to a node whose owner
    lives), undo a node whose owner died without its teardown; return what could not be undone."""
    with _machine_lock():
        return _remove_dead_node_locked(state)


@contextlib.contextmanager
def _machine_lock() -> Iterator[IO[str]]:
    path = v.cache_root() / ".realnode.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield handle


# --- the node ---------------------------------------------------------------------------------------------


class RealNode:
    """One real node on this machine; see the module doc. `prepare_host()` before the control plane starts
    (it must listen on `GATEWAY`), `start(plane)` after, `stop()` always (idempotent)."""

    def __init__(self, report: Report = _quiet, start_timeout: float = 180.0) -> None:
        self._report = report
        self._timeout = start_timeout
        self._lock: contextlib.ExitStack | None = None
        self._processes: list[ManagedProcess] = []
        self.state = STATE_DIR
        self.name = NODE_NAME

    @property
    def socket(self) -> Path:
        return self.state / "containerd" / "containerd.sock"

    def prepare_host(self) -> None:
        ensure_host_tools(report=self._report)
        for name in ("kubelet", "kube-proxy", "coredns", "pause"):  # built (once) before the host is touched
            tool_path(name, self._report)
        self._lock = contextlib.ExitStack()
        self._lock.enter_context(_machine_lock())
        try:
            left = _remove_dead_node_locked(self.state)
            if left:
                raise RealNodeError("a previous real node could not be removed:\n" + "\n".join(left))
            self.state.mkdir(parents=True)
            (self.state / "owner.pid").write_text(str(os.getpid()))
            saved = {name: _sysctl(name).read_text().strip() for name in _SYSCTLS}
            (self.state / "sysctl.json").write_text(json.dumps(saved))
            (self.state / "netns-before.json").write_text(json.dumps(sorted(_netns_names())))
            for name in _SYSCTLS:
                _sysctl(name).write_text("1")
            _run("ip", "link", "add", BRIDGE, "type", "bridge")
            _run("ip", "addr", "add", f"{GATEWAY}/24", "dev", BRIDGE)
            _run("ip", "link", "set", BRIDGE, "up")
            for spec in _FORWARD_RULES:
                _run("iptables", "-w", "-I", *_forward_rule(spec)[:1], "1", *_forward_rule(spec)[1:])
        except BaseException:
            self.stop()
            raise

    def stop_daemons(self) -> None:
        """Stop CoreDNS, kube-proxy, kubelet and containerd (the pods keep running until `stop`)."""
        try:
            for process in reversed(self._processes):
                process.stop(grace_seconds=5.0)
        finally:
            self._processes = []

    def stop(self) -> None:
        """Stop the daemons, remove the pods and undo every change to the host; raise if something is left."""
        try:
            self.stop_daemons()
            if self._lock is not None:
                problems = teardown(self.state)
                if problems:
                    raise RealNodeError("the real node left these behind:\n" + "\n".join(problems))
        finally:
            if self._lock is not None:
                self._lock.close()
                self._lock = None

    def start(self, plane: ControlPlane) -> None:
        started = time.monotonic()
        pki = pkimod.Pki(plane.workdir / "pki")
        self._start_containerd()
        self._run_ctr("images", "import", str(tool_path("pause").parent / "pause.tar"))
        self._start_kubelet(plane, pki)
        self._start_kube_proxy(plane)
        self._start_coredns(plane)
        plane.kubectl("wait", "--for=condition=Ready", "--timeout=120s", f"node/{self.name}")
        self._report(f"real node {self.name} Ready in {time.monotonic() - started:.1f}s (pods on {POD_SUBNET})")

    def dead(self) -> list[str]:
        return [
            f"{p.name} exited with code {p.exit_code()}:\n{p.log_tail()}" for p in self._processes if not p.running()
        ]

    def import_image(self, reference: str) -> None:
        """Copy a podman image into the node's containerd (what `imagePullPolicy: Never` pods then use)."""
        archive = self.state / "import.tar"
        try:
            saved = subprocess.run(
                ["podman", "save", "--format", "docker-archive", "-o", str(archive), reference],
                capture_output=True,
                check=False,
            )
            if saved.returncode != 0:
                raise RealNodeError(f"podman save {reference} failed: {saved.stderr.decode().strip()}")
            self._run_ctr("images", "import", str(archive))
        finally:
            archive.unlink(missing_ok=True)

    def shared_volume(self, name: str, size_gib: int = 1200) -> Path:
        """A directory for a hostPath PersistentVolume playing a run's shared file system (FSx): a tmpfs of the
        claim's nominal size, so the preflight's free-space check sees the volume a platform would give (a 4B
        model's two checkpoints need 105 GiB, more than this disk may have free), while only what is written takes
        memory. Open to every uid (the pods' user is not root); unmounted by `teardown` with the state directory."""
        path = self.state / "volumes" / name
        path.mkdir(parents=True)
        _run("mount", "-t", "tmpfs", "-o", f"size={size_gib}G,mode=1777", f"grpo-{name}", str(path))
        return path

    # --- daemons ----------------------------------------------------------------------------------------

    def _launch(self, name: str, argv: list[str]) -> ManagedProcess:
        process = ManagedProcess(name, argv, self.state / "logs" / f"{name}.log").start()
        self._processes.append(process)
        return process

    def _wait(self, what: str, ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self._timeout
        while time.monotonic() < deadline:
            dead = self.dead()
            if dead:
                raise RealNodeError(f"while waiting for {what}: " + "\n".join(dead))
            if ready():
                return
            time.sleep(0.2)
        tails = "\n".join(f"--- {p.name}:\n{p.log_tail(15)}" for p in self._processes)
        raise RealNodeError(f"timed out after {self._timeout:.0f}s waiting for {what}\n{tails}")

    def _run_ctr(self, *args: str) -> str:
        return _run("ctr", "--address", str(self.socket), "--namespace", "k8s.io", *args).stdout.decode()

    def _start_containerd(self) -> None:
        base = self.state / "containerd"
        cni_conf = self.state / "cni" / "net.d"
        cni_conf.mkdir(parents=True)
        conflist = {
            "cniVersion": "0.4.0",
            "name": "grpo-realnode",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": POD_SUBNET, "gateway": GATEWAY}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(self.state / "cni" / "ipam"),
                    },
                }
            ],
        }
        (cni_conf / "10-grpo-realnode.conflist").write_text(json.dumps(conflist, indent=2))
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        config = f"""version = 2
root = "{base / "root"}"
state = "{base / "state"}"
[grpc]
  address = "{self.socket}"
[ttrpc]
  address = "{self.socket}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{base / "opt"}"
[{cri}]
  sandbox_image = "{PAUSE_REFERENCE}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{cri}.containerd.runtimes.runc.options]
  BinaryName = "{shutil.which("runc")}"
  SystemdCgroup = false
[{cri}.cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{cni_conf}"
  max_conf_num = 1
"""
        base.mkdir(parents=True, exist_ok=True)
        (base / "config.toml").write_text(config)
        containerd = shutil.which("containerd") or "containerd"
        self._launch("containerd", [containerd, "--config", str(base / "config.toml"), "--log-level", "warn"])
        self._wait(
            "containerd", lambda: _run("ctr", "--address", str(self.socket), "version", check=False).returncode == 0
        )

    def _start_kubelet(self, plane: ControlPlane, pki: pkimod.Pki) -> None:
        directory = self.state / "kubelet"
        directory.mkdir(parents=True)
        serving = pkimod.issue(pki, "kubelet-serving", self.name, server=True, dns=(self.name,), ips=(GATEWAY,))
        client = pkimod.issue(pki, "kubelet-client", f"system:node:{self.name}", ("system:nodes",))
        kubeconfig = pkimod.write_kubeconfig(
            directory / "kubelet.kubeconfig",
            plane.server,
            pki,
            {"client-certificate": str(client[0]), "client-key": str(client[1])},
        )
        resolv = directory / "resolv.conf"
        resolv.write_text("")
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "address": GATEWAY,
            "port": _free_port(),
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": _free_port(),
            "tlsCertFile": str(serving[0]),
            "tlsPrivateKeyFile": str(serving[1]),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(pki.ca_cert)},
            },
            "authorization": {"mode": "Webhook"},
            "clusterDNS": [CLUSTER_DNS],
            "clusterDomain": "cluster.local",
            "resolvConf": str(resolv),
            "failSwapOn": False,
            "podLogsDir": str(self.state / "pod-logs"),
            "maxPods": 50,
            "serializeImagePulls": False,
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
        }
        (directory / "config.yaml").write_text(yaml.safe_dump(config))
        self._launch(
            "kubelet",
            [
                str(tool_path("kubelet")),
                f"--config={directory / 'config.yaml'}",
                f"--kubeconfig={kubeconfig}",
                f"--root-dir={directory / 'root'}",
                f"--cert-dir={directory / 'pki'}",
                f"--hostname-override={self.name}",
                f"--node-ip={GATEWAY}",
                "--node-labels=" + ",".join(f"{k}={val}" for k, val in NODE_LABELS.items()),
                "--v=1",
            ],
        )
        self._wait(
            f"node/{self.name} registered",
            lambda: plane.kubectl("get", f"node/{self.name}", check=False).returncode == 0,
        )

    def _start_kube_proxy(self, plane: ControlPlane) -> None:
        directory = self.state / "kube-proxy"
        directory.mkdir(parents=True)
        health = _free_port()
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "mode": "iptables",
            "clientConnection": {"kubeconfig": str(plane.kubeconfig)},
            "clusterCIDR": POD_SUBNET,
            "hostnameOverride": self.name,
            "healthzBindAddress": f"127.0.0.1:{health}",
            "metricsBindAddress": f"127.0.0.1:{_free_port()}",
            "nodePortAddresses": [f"{GATEWAY}/32"],
            "iptables": {"localhostNodePorts": False},
            # leave the host's conntrack table size and timeouts alone
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        }
        (directory / "config.yaml").write_text(yaml.safe_dump(config))
        self._launch("kube-proxy", [str(tool_path("kube-proxy")), f"--config={directory / 'config.yaml'}"])
        self._wait("kube-proxy /healthz", lambda: _http_ok(f"http://127.0.0.1:{health}/healthz"))

    def _start_coredns(self, plane: ControlPlane) -> None:
        directory = self.state / "coredns"
        directory.mkdir(parents=True)
        ready = _free_port()
        corefile = f""".:53 {{
    bind {GATEWAY}
    errors
    ready 127.0.0.1:{ready}
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {plane.kubeconfig}
        pods insecure
    }}
    cache 30
}}
"""
        (directory / "Corefile").write_text(corefile)
        self._launch("coredns", [str(tool_path("coredns")), "-conf", str(directory / "Corefile")])
        self._wait("CoreDNS /ready", lambda: _http_ok(f"http://127.0.0.1:{ready}/ready"))
        ports = [{"name": "dns", "port": 53, "protocol": "UDP"}, {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": {"k8s-app": "kube-dns"}},
            "spec": {"clusterIP": CLUSTER_DNS, "ports": [{**p, "targetPort": 53} for p in ports]},
        }
        endpoints = {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": "kube-dns-host",
                "namespace": "kube-system",
                "labels": {"kubernetes.io/service-name": "kube-dns"},
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [GATEWAY], "conditions": {"ready": True}}],
            "ports": ports,
        }
        items = {"apiVersion": "v1", "kind": "List", "items": [service, endpoints]}
        plane.kubectl("apply", "-f", "-", input=json.dumps(items))


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310
            return bool(response.status == 200)
    except OSError:
        return False
