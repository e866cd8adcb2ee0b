"""Child processes that cannot outlive the Python process that started them.

This module owns the lifetime of the control-plane daemons (etcd, kube-apiserver, ...). Each one runs in
its own process group (so a stop reaches anything it forked) with the Linux parent-death signal set to
SIGKILL (so it dies even when its parent is killed with SIGKILL and no Python code runs). A stop sends
SIGTERM to the group, waits, then SIGKILLs it. Every live process is also stopped at interpreter exit, and
`terminate_on_signals` turns SIGTERM/SIGHUP into an exception (like Ctrl-C) so `with` blocks unwind.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import subprocess
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType

_PR_SET_PDEATHSIG = 1
_LIVE: set[ManagedProcess] = set()
_LIVE_LOCK = threading.Lock()


def _die_with_parent(parent_pid: int) -> None:
    """Runs in the child between fork and exec: ask the kernel to SIGKILL us when the parent dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


class ManagedProcess:
    """One daemon with its output in a log file."""

    def __init__(self, name: str, argv: Sequence[str], log: Path) -> None:
        self.name = name
        self.argv = list(argv)
        self.log = log
        self._popen: subprocess.Popen[bytes] | None = None

    def start(self) -> ManagedProcess:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        parent = os.getpid()
        with self.log.open("ab") as sink:
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=lambda: _die_with_parent(parent),  # noqa: PLW1509 - only prctl, no locks
            )
        with _LIVE_LOCK:
            _LIVE.add(self)
        return self

    @property
    def pid(self) -> int:
        if self._popen is None:
            raise RuntimeError(f"{self.name} was never started")
        return self._popen.pid

    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def exit_code(self) -> int | None:
        return None if self._popen is None else self._popen.poll()

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace_seconds: float = 10.0) -> None:
        """SIGTERM the process group, then SIGKILL it after `grace_seconds`; always reap the leader."""
        popen = self._popen
        if popen is None:
            return
        try:
            for sig, wait in ((signal.SIGTERM, grace_seconds), (signal.SIGKILL, 10.0)):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(popen.pid, sig)
                try:
                    popen.wait(timeout=wait)
                except subprocess.TimeoutExpired:
                    continue
                # the leader is gone; make sure nothing else in its group survives
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(popen.pid, signal.SIGKILL)
                break
        finally:
            with _LIVE_LOCK:
                _LIVE.discard(self)


def stop_all() -> None:
    """Stop every process this interpreter started and has not stopped yet (newest first)."""
    with _LIVE_LOCK:
        live = sorted(_LIVE, key=lambda p: p.pid, reverse=True)
    for process in live:
        process.stop(grace_seconds=5.0)


atexit.register(stop_all)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived. A KeyboardInterrupt so everything unwinds as on Ctrl-C (pytest too)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"received {signal.Signals(signum).name}")
        self.exit_code = 128 + signum


def _exit_on_signal(signum: int, _frame: FrameType | None) -> None:
    signal.signal(signum, signal.SIG_IGN)  # a second signal must not interrupt the teardown
    raise Terminated(signum)


@contextlib.contextmanager
def terminate_on_signals() -> Iterator[None]:
    """While active (main thread only), SIGTERM and SIGHUP raise `Terminated` instead of killing Python."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    for sig, handler in previous.items():
        if handler in (signal.SIG_DFL, None):
            signal.signal(sig, _exit_on_signal)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            if handler in (signal.SIG_DFL, None):
                signal.signal(sig, signal.SIG_DFL)
