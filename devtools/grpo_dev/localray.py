"""A real, CPU-only Ray head on 127.0.0.1 for `make run` and the operator tests, and its complete teardown.

`LocalRayHead` runs `ray start --head` with every port on loopback (GCS, dashboard, client server, raylet,
object manager, agents, metrics), a short private temp dir under /tmp, usage stats off, and the custom
resource `{"gpu_node": 1}` that the operator's job submissions ask for, exactly as on a real cluster. It
waits until the Jobs API answers at `dashboard_url` (what `ray.job_submission.JobSubmissionClient` takes).

Token authentication is on by default, as on the operator's clusters: the head starts with
`RAY_AUTH_MODE=token` and a random `RAY_AUTH_TOKEN` (or the `auth_token` given), so every HTTP call to the
dashboard, the Jobs API included, needs `Authorization: Bearer <token>` (`auth_headers`), and every gRPC
client (a driver, `ray health-check`) needs the same two variables. Ray's aiohttp middleware answers 401
without a token and 403 with a wrong one; its health endpoints stay open (Ray 2.56.1 and 2.60:
python/ray/_private/authentication/http_token_authentication.py, get_token_auth_middleware;
python/ray/dashboard/http_server_head.py, public_exact_paths). `auth=False` starts one without.

Every Python process of the head starts with the trainer image's stacks hook (`grpo_launcher.stackdump`, through a
`sitecustomize` on its PYTHONPATH) writing into the operator's `GRPO_STACKS_DIR`, as in a Ray pod, so the operator's
stacks job reads them here too; a job may point its own processes elsewhere with `env_vars`.

Teardown is scoped to this head, never a machine-wide `ray stop`: every process of the head (daemons,
workers, job supervisors and job entrypoints) inherits the environment variable `GRPO_LOCALRAY_HEAD=<temp
dir>`, and `stop()` signals exactly the processes whose environment carries it (SIGTERM, then SIGKILL),
then removes the temp dir. It runs on `with`-block exit (normal or exception), on SIGINT/SIGTERM/SIGHUP
(turned into a normal Python exit), at interpreter exit, and, through a small reaper process that waits
for its parent's pipe to close, even when the owning process is SIGKILLed.

`python -m grpo_dev.localray up` prints the dashboard URL and blocks until Ctrl-C.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from grpo_launcher.stackdump import ENV as STACKS_ENV
from grpo_launcher.stackdump import install_pth
from grpo_operator.render.job import STACKS_DIR

from grpo_dev.localcluster.processes import terminate_on_signals

MARKER_ENV = "GRPO_LOCALRAY_HEAD"
WORKER_MARKER_ENV = "GRPO_LOCALRAY_WORKER"  # also on a worker node's processes, so it can go before its head
HOST = "127.0.0.1"
DEFAULT_RESOURCES: Mapping[str, float] = {"gpu_node": 1}

_LIVE: set[LocalRayHead] = set()
_LIVE_LOCK = threading.Lock()


class LocalRayHeadError(RuntimeError):
    """The head could not be started (the message carries the tail of `ray start`'s log)."""


@dataclass(frozen=True)
class HeadPorts:
    """Every TCP port the head listens on, all chosen free on 127.0.0.1."""

    gcs: int
    dashboard: int
    client_server: int
    node_manager: int
    object_manager: int
    metrics_export: int
    agent_listen: int
    agent_grpc: int
    runtime_env_agent: int

    @classmethod
    def pick(cls) -> HeadPorts:
        """Ask the kernel for distinct free ports (held open together so none repeats)."""
        with contextlib.ExitStack() as stack:
            ports = []
            for _ in range(9):
                sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
                sock.bind((HOST, 0))
                ports.append(int(sock.getsockname()[1]))
        return cls(*ports)


def _ray_cli() -> str:
    beside = Path(sys.executable).with_name("ray")
    if beside.exists():
        return str(beside)
    found = shutil.which("ray")
    if found is None:
        raise LocalRayHeadError("no `ray` executable next to this Python or on PATH: pip install 'ray[default]'")
    return found


def head_pids(temp_dir: str | Path, marker: str = MARKER_ENV) -> list[int]:
    """Live processes (not zombies) whose environment marks them as part of the head using `temp_dir` (or, with
    `marker=WORKER_MARKER_ENV`, of the worker node whose mark is `temp_dir`)."""
    needle = f"{marker}={temp_dir}".encode() + b"\0"
    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone, or not ours
            continue
        if environ.startswith(needle) or b"\0" + needle in environ or environ.endswith(b"\0" + needle[:-1]):
            found.append(int(entry.name))
    return sorted(found)


def terminate(
    temp_dir: str | Path, grace_seconds: float = 5.0, settle_seconds: float = 1.0, marker: str = MARKER_ENV
) -> list[int]:
    """SIGTERM every process of the head, then SIGKILL what is left; returns the survivors (normally none).

    SIGKILL comes after `grace_seconds`, or sooner once no process has exited for `settle_seconds`: Ray
    2.60's gcs_server logs "received SIGTERM, shutting down" and then hangs flushing its event recorder,
    and the autoscaler monitor hangs waiting for it, so waiting longer gains nothing.
    """
    for sig, wait in ((signal.SIGTERM, grace_seconds), (signal.SIGKILL, 10.0)):
        pids = head_pids(temp_dir, marker)
        if not pids:
            return []
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        last_change, previous = time.monotonic(), pids
        while (left := head_pids(temp_dir, marker)) and time.monotonic() < deadline:
            if left != previous:
                last_change, previous = time.monotonic(), left
            elif sig == signal.SIGTERM and time.monotonic() - last_change > settle_seconds:
                break
            time.sleep(0.1)
    return head_pids(temp_dir, marker)


@dataclass(frozen=True)
class WorkerNode:
    """A raylet joined to a `LocalRayHead` (`LocalRayHead.worker_node`)."""

    node_id: str
    mark: str  # the WORKER_MARKER_ENV value its processes carry

    def pids(self) -> list[int]:
        return head_pids(self.mark, WORKER_MARKER_ENV)


class LocalRayHead:
    """A `ray start --head` on loopback; use as a context manager, or call `start()` and `stop()`."""

    def __init__(
        self,
        *,
        num_cpus: int = 8,
        resources: Mapping[str, float] | None = None,
        object_store_bytes: int = 128 * 1024 * 1024,
        startup_timeout: float = 120.0,
        ray_executable: str | None = None,
        auth: bool = True,
        auth_token: str | None = None,
    ) -> None:
        self.num_cpus = num_cpus
        self.resources = dict(DEFAULT_RESOURCES if resources is None else resources)
        self.object_store_bytes = object_store_bytes
        self.startup_timeout = startup_timeout
        self.ray_executable = ray_executable or _ray_cli()
        if not auth and auth_token is not None:
            raise ValueError("auth_token given with auth=False")
        self.auth_token: str | None = (auth_token or secrets.token_urlsafe(32)) if auth else None
        self._temp_dir: Path | None = None
        self._ports: HeadPorts | None = None
        self._reaper: subprocess.Popen[bytes] | None = None
        self._signals: contextlib.ExitStack | None = None

    # ---- what callers use -------------------------------------------------------------------------------
    @property
    def temp_dir(self) -> Path:
        if self._temp_dir is None:
            raise RuntimeError("the Ray head is not started")
        return self._temp_dir

    @property
    def ports(self) -> HeadPorts:
        if self._ports is None:
            raise RuntimeError("the Ray head is not started")
        return self._ports

    @property
    def dashboard_url(self) -> str:
        """The Jobs API / dashboard address, e.g. for `JobSubmissionClient(head.dashboard_url)`."""
        return f"http://{HOST}:{self.ports.dashboard}"

    @property
    def auth_headers(self) -> dict[str, str]:
        """What a client sends to the dashboard and the Jobs API (`JobSubmissionClient(url, headers=...)`)."""
        return {"Authorization": f"Bearer {self.auth_token}"} if self.auth_token else {}

    def auth_environment(self) -> dict[str, str]:
        """What a gRPC client of this head (a driver, `ray health-check`) needs in its environment."""
        if self.auth_token is None:
            return {"RAY_AUTH_MODE": "disabled"}
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.auth_token}

    @property
    def gcs_address(self) -> str:
        """`host:port` of the GCS, e.g. for `ray.init(address=...)` or `RAY_ADDRESS`."""
        return f"{HOST}:{self.ports.gcs}"

    @property
    def node_ip(self) -> str:
        """The node IP Ray reports for this head (and hence in a job's driver_info)."""
        return HOST

    def pids(self) -> list[int]:
        """Live processes belonging to this head (daemons, workers, job entrypoints)."""
        return head_pids(self.temp_dir) if self._temp_dir is not None else []

    def log_path(self) -> Path:
        return self.temp_dir / "ray-start.log"

    def __enter__(self) -> LocalRayHead:
        self._signals = contextlib.ExitStack()
        self._signals.enter_context(terminate_on_signals())
        try:
            return self.start()
        except BaseException:
            self._signals.close()
            raise

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            self.stop()
        finally:
            if self._signals is not None:
                self._signals.close()

    @contextlib.contextmanager
    def worker_node(self, resources: Mapping[str, float], num_cpus: int = 0) -> Iterator[WorkerNode]:
        """A second raylet on loopback joined to this head, as a Ray worker pod is on a cluster, advertising
        `resources`. Its processes carry the head's mark too, so the head's teardown takes
        them whatever happens; leaving the block stops them first. Started through Ray's `Node` (as
        `ray.cluster_utils.Cluster.add_node` does): `ray start --address` refuses to join under the loopback
        switch the head needs (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0) and, without it, dials the host's IP."""
        mark = str(self.temp_dir / f"worker-{secrets.token_hex(3)}")
        spec = {
            "gcs_address": self.gcs_address,
            "resources": dict(resources),
            "num_cpus": num_cpus,
            "object_store_memory": self.object_store_bytes,
            "dashboard_agent_listen_port": HeadPorts.pick().agent_listen,
        }
        env = {**self._environment(), WORKER_MARKER_ENV: mark}
        argv = [sys.executable, "-m", "grpo_dev.localray", "_join", json.dumps(spec)]
        joiner = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        try:
            assert joiner.stdout is not None
            lines = []
            for raw in joiner.stdout:
                line = raw.decode(errors="replace").rstrip()
                lines.append(line)
                if line.startswith("joined "):
                    break
            else:
                raise LocalRayHeadError("the worker node did not join:\n" + "\n".join(lines[-30:]))
            yield WorkerNode(line.removeprefix("joined "), mark)
        finally:
            terminate(mark, marker=WORKER_MARKER_ENV)
            joiner.wait(timeout=30)

    # ---- lifecycle --------------------------------------------------------------------------------------
    def start(self, attempts: int = 3) -> LocalRayHead:
        """Start the head and wait until its Jobs API answers; retries with fresh ports if one was taken."""
        if self._temp_dir is not None:
            raise RuntimeError("the Ray head is already started")
        for attempt in range(1, attempts + 1):
            self._temp_dir = Path(tempfile.mkdtemp(prefix="rh-", dir="/tmp"))
            self._ports = HeadPorts.pick()
            with _LIVE_LOCK:
                _LIVE.add(self)
            self._reaper = self._start_reaper()
            try:
                self._ray_start()
                self._wait_ready()
                return self
            except LocalRayHeadError:
                self.stop()
                if attempt == attempts:
                    raise
            except BaseException:
                self.stop()
                raise
        raise AssertionError("unreachable")

    def stop(self, grace_seconds: float = 5.0) -> None:
        """Stop every process of this head and remove its temp dir; idempotent."""
        temp_dir, reaper = self._temp_dir, self._reaper
        if temp_dir is None:
            return
        try:
            survivors = terminate(temp_dir, grace_seconds)
            if survivors:
                print(f"localray: processes {survivors} of {temp_dir} survived SIGKILL", file=sys.stderr)
            shutil.rmtree(temp_dir, ignore_errors=True)
        finally:
            if reaper is not None:
                with contextlib.suppress(OSError):
                    if reaper.stdin is not None:
                        reaper.stdin.close()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    reaper.wait(timeout=30)
            self._temp_dir = None
            self._reaper = None
            with _LIVE_LOCK:
                _LIVE.discard(self)

    # ---- internals --------------------------------------------------------------------------------------
    def _environment(self) -> dict[str, str]:
        inherited = ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
        env = {k: v for k, v in os.environ.items() if k not in inherited}
        env.update(self.auth_environment())  # explicit either way: Ray 2.60 turns token auth on when ~/.ray has one
        env[MARKER_ENV] = str(self.temp_dir)
        env["RAY_USAGE_STATS_ENABLED"] = "0"
        # Without this Ray replaces a loopback --node-ip-address by the host's routable IP and binds to it.
        env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        # The dashboard's py-spy stack dumps (/worker/traceback), as the operator's RayCluster turns them on; the
        # agent finds py-spy on PATH, so the interpreter's own bin directory (the venv's) comes first.
        env["RAY_DASHBOARD_ENABLE_PROFILING"] = "1"
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        # Every Python process of the head starts with the stacks hook, as in a Ray pod of the trainer image
        # (`_stacks_hook`): the operator's stacks job reads them without ptrace.
        env[STACKS_ENV] = STACKS_DIR
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(self._stacks_hook()), env.get("PYTHONPATH")) if p)
        return env

    def _stacks_hook(self) -> Path:
        """A directory whose `sitecustomize` adds a site directory holding the trainer image's own `.pth`
        (`grpo_launcher.stackdump`): the venv here has no `.pth` of ours, and on PYTHONPATH only a `sitecustomize`
        runs at start. The directory is the operator's fixed one (render/job.py `STACKS_DIR`), shared by the heads
        of one machine: dump files are named by pid, and the stacks job signals only processes that catch it."""
        custom, pth_dir = self.temp_dir / "stacks-hook", self.temp_dir / "stacks-hook-site"
        if not (custom / "sitecustomize.py").exists():
            custom.mkdir(exist_ok=True)
            pth_dir.mkdir(exist_ok=True)
            install_pth(pth_dir)
            (custom / "sitecustomize.py").write_text(f"import site\nsite.addsitedir({str(pth_dir)!r})\n")
        return custom

    def ray_start_argv(self) -> list[str]:
        p = self.ports
        return [
            self.ray_executable,
            "start",
            "--head",
            "--disable-usage-stats",
            f"--node-ip-address={HOST}",
            f"--port={p.gcs}",
            f"--temp-dir={self.temp_dir}",
            "--include-dashboard=true",
            f"--dashboard-host={HOST}",
            f"--dashboard-port={p.dashboard}",
            f"--ray-client-server-port={p.client_server}",
            f"--node-manager-port={p.node_manager}",
            f"--object-manager-port={p.object_manager}",
            f"--metrics-export-port={p.metrics_export}",
            f"--dashboard-agent-listen-port={p.agent_listen}",
            f"--dashboard-agent-grpc-port={p.agent_grpc}",
            f"--runtime-env-agent-port={p.runtime_env_agent}",
            f"--num-cpus={self.num_cpus}",
            "--num-gpus=0",
            f"--resources={json.dumps(self.resources)}",
            f"--object-store-memory={self.object_store_bytes}",
        ]

    def _ray_start(self) -> None:
        with self.log_path().open("wb") as log:
            try:
                done = subprocess.run(
                    self.ray_start_argv(),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self._environment(),
                    start_new_session=True,  # Ctrl-C in a terminal reaches only us; we tear down in order
                    timeout=self.startup_timeout,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise LocalRayHeadError(
                    f"`ray start --head` did not finish within {self.startup_timeout:.0f}s:\n{self._log_tail()}"
                ) from None
        if done.returncode != 0:
            raise LocalRayHeadError(f"`ray start --head` exited with {done.returncode}:\n{self._log_tail()}")

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            try:
                request = urllib.request.Request(f"{self.dashboard_url}/api/jobs/", headers=self.auth_headers)  # noqa: S310
                with urllib.request.urlopen(request, timeout=5) as reply:  # noqa: S310
                    if reply.status == 200:
                        return
                    last = f"HTTP {reply.status}"
            except (urllib.error.URLError, OSError) as exc:
                last = str(exc)
            time.sleep(0.2)
        raise LocalRayHeadError(
            f"the Ray Jobs API at {self.dashboard_url} did not answer within {self.startup_timeout:.0f}s "
            f"(last: {last}):\n{self._log_tail()}"
        )

    def _log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path().read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no ray start log)"

    def _start_reaper(self) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if k != MARKER_ENV}
        return subprocess.Popen(
            [sys.executable, "-m", "grpo_dev.localray", "_reap", str(self.temp_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # survives our process group being killed
        )


def stop_all() -> None:
    """Stop every head this interpreter started and has not stopped (runs at interpreter exit)."""
    with _LIVE_LOCK:
        live = list(_LIVE)
    for head in live:
        head.stop()


atexit.register(stop_all)


def _join(spec: str) -> int:
    """Worker-node process: start a raylet (and its agents) joined to the head `spec` names; block."""
    # Only this process needs Ray's internals; the head's owner runs the `ray` CLI and never imports them.
    from ray._private.node import Node  # noqa: PLC0415
    from ray._private.parameter import RayParams  # noqa: PLC0415

    params = RayParams(node_ip_address=HOST, num_gpus=0, min_worker_port=0, max_worker_port=0, **json.loads(spec))
    params.update_if_absent(include_log_monitor=False, node_manager_port=0)  # type: ignore[no-untyped-call]
    node = Node(params, head=False, shutdown_at_exit=False, spawn_reaper=False)
    print(f"joined {node.node_id}", flush=True)
    while True:
        time.sleep(3600)


def _reap(temp_dir: str) -> int:
    """Reaper process: wait until the owner's pipe closes (stop, exit or SIGKILL), then clean up."""
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        while sys.stdin.buffer.read(4096):
            pass
    terminate(temp_dir)
    shutil.rmtree(temp_dir, ignore_errors=True)
    return 0


@contextlib.contextmanager
def _printing_errors() -> Iterator[None]:
    try:
        yield
    except LocalRayHeadError as exc:
        print(f"localray: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grpo_dev.localray", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start a local Ray head, print its dashboard URL, block until Ctrl-C")
    up.add_argument("--num-cpus", type=int, default=8, help="CPUs the head advertises (default 8)")
    up.add_argument("--no-auth", action="store_true", help="start without token authentication")
    reap = sub.add_parser("_reap", help=argparse.SUPPRESS)
    reap.add_argument("temp_dir")
    join = sub.add_parser("_join", help=argparse.SUPPRESS)
    join.add_argument("spec")
    args = parser.parse_args(argv)
    if args.command == "_reap":
        return _reap(args.temp_dir)
    if args.command == "_join":
        return _join(args.spec)
    with _printing_errors(), LocalRayHead(num_cpus=args.num_cpus, auth=not args.no_auth) as head:
        print(head.dashboard_url, flush=True)
        print(
            f"localray: Ray head up (GCS {head.gcs_address}, temp dir {head.temp_dir}); "
            f"use it with RAY_ADDRESS={head.dashboard_url}; Ctrl-C stops it",
            file=sys.stderr,
            flush=True,
        )
        if head.auth_token is not None:  # the token in a file only its owner reads, never on a terminal
            token_file = head.temp_dir / "auth_token"
            token_file.touch(mode=0o600)
            token_file.write_text(head.auth_token)
            print(
                f"localray: token auth on: export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH={token_file}",
                file=sys.stderr,
                flush=True,
            )
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
