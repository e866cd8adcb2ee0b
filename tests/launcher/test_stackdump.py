"""Python stacks without ptrace, on real processes of this host: the `.pth` line the image installs registers a
child's faulthandler on the stacks signal, the collector finds it by its SigCgt bit and dumps it, a process without
the hook is never signalled (the signal's default action would kill it), a forked child writes its own file, and a
broken directory never breaks an interpreter's start."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from grpo_launcher import stackdump, stacks

pytestmark = pytest.mark.skipif(stackdump.SIGNAL is None, reason="no real-time signals on this platform")

SRC = str(Path(stackdump.__file__).resolve().parents[1])

WAITER = """
import os, sys, time
def {name}():
    while True:
        time.sleep(0.2)
print("ready", os.getpid(), flush=True)
{name}()
"""

FORKER = """
import os, sys, time
def parent_waits_here(child):
    # Ready once the child has its own file (its after-fork hook runs in the child, on its own time), and said from
    # inside this frame, so a signal sent on "ready" cannot find the parent still at the call.
    while not os.path.exists(os.path.join(os.environ["GRPO_STACKS_DIR"], f"stacks-{child}.txt")):
        time.sleep(0.05)
    print("ready", os.getpid(), child, flush=True)
    while True:
        time.sleep(0.2)
def forked_child_waits_here():
    while True:
        time.sleep(0.2)
child = os.fork()
if child == 0:
    forked_child_waits_here()
parent_waits_here(child)
"""


@pytest.fixture
def site_dir(tmp_path: Path) -> Path:
    """A site directory holding the image's `.pth`, as site-packages does in the image."""
    where = tmp_path / "site"
    where.mkdir()
    stackdump.install_pth(where)
    return where


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for child in started:
        child.kill()
        child.wait(timeout=10)


def start(
    children: list[subprocess.Popen[str]], body: str, site_dir: Path | None, stacks_dir: str | None
) -> tuple[subprocess.Popen[str], list[int]]:
    """A Python child that processes `site_dir`'s `.pth` as `site` does at start (then runs `body`), and the pids
    on its ready line."""
    env = {k: v for k, v in os.environ.items() if k != stackdump.ENV}
    env["PYTHONPATH"] = SRC
    if stacks_dir is not None:
        env[stackdump.ENV] = stacks_dir
    prelude = f"import site; site.addsitedir({str(site_dir)!r})\n" if site_dir else ""
    child = subprocess.Popen(
        [sys.executable, "-c", prelude + body], stdout=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    children.append(child)
    assert child.stdout is not None
    line = child.stdout.readline().split()
    assert line[:1] == ["ready"], line
    return child, [int(p) for p in line[1:]]


def test_a_child_started_with_the_pth_is_dumped_through_its_signal_naming_its_function(
    tmp_path: Path, site_dir: Path, children: list[subprocess.Popen[str]]
) -> None:
    child, _ = start(children, WAITER.format(name="child_waits_in_named_frame"), site_dir, str(tmp_path / "stacks"))
    assert stacks.candidates(tmp_path / "stacks") == [child.pid]
    [dumped] = stacks.dump_stacks(tmp_path / "stacks", wait_seconds=30)
    assert dumped["pid"] == child.pid and "child_waits_in_named_frame" in dumped["dump"]
    assert sys.executable in dumped["cmdline"]
    again = stacks.dump_stacks(tmp_path / "stacks", wait_seconds=30)  # only the new dump, not the first one again
    assert again[0]["dump"].count("child_waits_in_named_frame") == 1
    assert child.poll() is None  # a dump does not stop the process


def test_a_process_without_the_hook_is_never_signalled_even_with_a_dump_file_of_its_pid(
    tmp_path: Path, site_dir: Path, children: list[subprocess.Popen[str]]
) -> None:
    directory = tmp_path / "stacks"
    directory.mkdir()
    plain, _ = start(children, WAITER.format(name="plain_waits"), site_dir, None)  # no GRPO_STACKS_DIR: no hook
    stackdump.dump_path(directory, plain.pid).write_text("")  # a stale file of a dead process that had this pid
    assert not stackdump.registered(plain.pid)
    assert stacks.candidates(directory) == []
    assert stacks.dump_stacks(directory, wait_seconds=1, pids=[plain.pid]) == []
    assert plain.poll() is None  # still alive: the real-time signal's default action would have killed it


def test_a_forked_child_writes_its_own_file(
    tmp_path: Path, site_dir: Path, children: list[subprocess.Popen[str]]
) -> None:
    directory = tmp_path / "stacks"
    _, (parent_pid, child_pid) = start(children, FORKER, site_dir, str(directory))
    try:
        dumps = {d["pid"]: d["dump"] for d in stacks.dump_stacks(directory, wait_seconds=30)}
        assert set(dumps) == {parent_pid, child_pid}
        assert "forked_child_waits_here" in dumps[child_pid] and "parent_waits_here" not in dumps[child_pid]
        assert "parent_waits_here" in dumps[parent_pid] and "forked_child_waits_here" not in dumps[parent_pid]
    finally:
        os.kill(child_pid, 9)


@pytest.mark.parametrize("stacks_dir", [None, "", "/proc/no-such-dir/stacks"])
def test_without_a_usable_directory_the_hook_registers_nothing_and_the_interpreter_starts(
    site_dir: Path, children: list[subprocess.Popen[str]], stacks_dir: str | None
) -> None:
    child, _ = start(children, WAITER.format(name="starts_anyway"), site_dir, stacks_dir)
    assert not stackdump.registered(child.pid)


def test_the_image_build_check_fails_without_the_hook_and_passes_with_it(tmp_path: Path, site_dir: Path) -> None:
    check = f"import site; site.addsitedir({str(site_dir)!r}); from grpo_launcher import stackdump; "
    check += "raise SystemExit(stackdump.main(['--check']))"
    env = {k: v for k, v in os.environ.items() if k != stackdump.ENV} | {"PYTHONPATH": SRC}
    without = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True, text=True, check=False)
    assert without.returncode == 1 and "did not register" in without.stdout
    env[stackdump.ENV] = str(tmp_path / "stacks")
    with_hook = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True, text=True, check=False)
    assert with_hook.returncode == 0, with_hook.stdout + with_hook.stderr


def test_flight_recorder_dumps_travel_as_base64_of_their_last_bytes(tmp_path: Path) -> None:
    (tmp_path / "nccl_trace_rank_0").write_bytes(b"\x80\x04" + b"x" * (stacks.FILE_BYTES + 10))
    (tmp_path / "stacks-1.txt").write_text("not a trace")
    traces = stacks.nccl_traces(tmp_path)
    assert list(traces) == ["nccl_trace_rank_0"]
    assert base64.b64decode(traces["nccl_trace_rank_0"]) == b"x" * stacks.FILE_BYTES


def test_log_tails_are_the_raylets_and_the_newest_workers(tmp_path: Path) -> None:
    (tmp_path / "raylet.out").write_text("old\n" + "r" * stacks.FILE_BYTES)
    for i in range(4):
        path = tmp_path / f"worker-{i}.err"
        path.write_text(f"worker {i}\n")
        os.utime(path, (1000 + i, 1000 + i))
    tails = stacks.log_tails(tmp_path)
    assert sorted(tails) == ["raylet.out", "worker-2.err", "worker-3.err"]
    assert tails["raylet.out"] == "r" * stacks.FILE_BYTES


def test_what_passes_the_nodes_budget_is_named_as_left_out() -> None:
    result = {
        "node": "n",
        "processes": [{"pid": 1, "cmdline": "a", "dump": "x" * 60}, {"pid": 2, "cmdline": "b", "dump": "y" * 60}],
        "nccl": {"nccl_trace_rank_0": "z" * 30},
        "logs": {"raylet.out": "l" * 10},
    }
    kept = stacks.bounded(result, limit=100)
    assert [p["dump"] for p in kept["processes"]] == ["x" * 60, ""]
    assert kept["nccl"] == {"nccl_trace_rank_0": "z" * 30} and kept["logs"] == {"raylet.out": "l" * 10}
    assert kept["left_out"] == ["stack of pid 2 (60 bytes)"]
