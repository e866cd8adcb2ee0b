"""No control-plane process outlives its owner: normal exit, exception, Ctrl-C, SIGTERM, even SIGKILL.

Each case starts a separate control plane in a child Python process, records every process that child
started (from /proc), ends the child one way, and checks that every one of those processes is gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

READY_TIMEOUT = 300.0


def descendants(root: int) -> set[int]:
    """PIDs of all live (non-zombie) descendants of `root`, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: set[int] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rindex(")") + 2] != "Z"


def wait_until_gone(pids: set[int], seconds: float = 60.0) -> set[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.2)
    return {p for p in pids if alive(p)}


def start_until_ready(argv: list[str], marker: str) -> subprocess.Popen[str]:
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert child.stdout is not None
    deadline = time.monotonic() + READY_TIMEOUT
    seen: list[str] = []
    while time.monotonic() < deadline:
        line = child.stdout.readline()
        if not line:
            break
        seen.append(line)
        if marker in line:
            return child
    child.kill()
    raise AssertionError("control plane never became ready:\n" + "".join(seen[-30:]))


def daemon_names(pids: set[int]) -> set[str]:
    names = set()
    for pid in pids:
        try:
            names.add(Path(f"/proc/{pid}/comm").read_text().strip())
        except OSError:
            continue
    return names


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_up_leaves_no_process_behind_when_its_owner_is_signalled(tmp_path: Path, how: signal.Signals) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    argv = [
        sys.executable,
        "-m",
        "grpo_dev.localcluster",
        "up",
        "--kubeconfig",
        str(kubeconfig),
        "--no-crds",
        "--scheduler",
    ]
    child = start_until_ready(argv, "ready: export KUBECONFIG=")
    started = descendants(child.pid)
    assert {"etcd", "kube-apiserver", "kube-controller", "kube-scheduler"} <= daemon_names(started)
    assert kubeconfig.is_file()

    os.kill(child.pid, how)
    child.wait(timeout=120)
    assert wait_until_gone(started) == set()
    if how != signal.SIGKILL:  # with SIGKILL no Python code runs; the kernel still kills the daemons
        assert child.returncode in (0, 128 + how)
        assert not kubeconfig.exists()


def test_an_exception_inside_the_with_block_stops_every_process(tmp_path: Path) -> None:
    script = textwrap.dedent("""
        from grpo_dev.localcluster import ControlPlane
        with ControlPlane(kuberay_crds=False, crd_dirs=[]) as plane:
            plane.kubectl("get", "--raw", "/readyz")
            print("inside", flush=True)
            input()
            raise RuntimeError("a failing test")
    """)
    child = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert child.stdout is not None and child.stdin is not None
    line = ""
    deadline = time.monotonic() + READY_TIMEOUT
    while "inside" not in line and time.monotonic() < deadline:
        line = child.stdout.readline()
        if not line:
            break
    started = descendants(child.pid)
    assert {"etcd", "kube-apiserver", "kube-controller"} <= daemon_names(started)

    child.stdin.write("\n")
    child.stdin.flush()
    output = child.stdout.read()
    child.wait(timeout=120)
    assert child.returncode == 1
    assert "RuntimeError: a failing test" in output
    assert wait_until_gone(started) == set()


def test_a_pytest_session_stopped_with_sigterm_tears_its_control_plane_down(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(
        textwrap.dedent("""
        import pytest
        from grpo_dev.localcluster import ControlPlane

        @pytest.fixture(scope="session")
        def control_plane():
            with ControlPlane(crd_dirs=[], kuberay_crds=False) as plane:
                yield plane
    """)
    )
    (tmp_path / "test_slow.py").write_text(
        textwrap.dedent("""
        import time

        def test_waits(control_plane):
            print("inside", control_plane.server, flush=True)
            time.sleep(600)

        def test_never_reached():
            raise AssertionError("the session should have stopped")
    """)
    )
    argv = [sys.executable, "-m", "pytest", "-s", "-p", "no:cacheprovider", "-o", "addopts=", str(tmp_path)]
    child = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert child.stdout is not None
    deadline = time.monotonic() + READY_TIMEOUT
    line = ""
    while "inside" not in line and time.monotonic() < deadline:
        line = child.stdout.readline()
        if not line:
            break
    started = descendants(child.pid)
    assert {"etcd", "kube-apiserver", "kube-controller"} <= daemon_names(started)

    child.send_signal(signal.SIGTERM)
    output = child.stdout.read()
    child.wait(timeout=120)
    assert wait_until_gone(started) == set()
    assert "KeyboardInterrupt" in output or "received SIGTERM" in output
    assert "test_never_reached" not in output
