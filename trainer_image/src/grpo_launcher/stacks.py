"""The stacks job: a short Ray job the operator submits before it stops a run, which reads every node's Python
stacks, NCCL flight-recorder dumps and Ray log tails without ptrace or exec.

`python -m grpo_launcher.stacks --dir DIR --seconds N` is its driver: one `num_cpus=0` task per alive node, pinned
there (`NodeAffinitySchedulingStrategy`, not soft), and one line per node on stdout as each answers, a JSON object
after `MARK`, or after `MISSING_MARK` the node that failed or did not answer within N seconds. The task
(`collect_node`) signals, in its own pod, only the processes that catch `stackdump.SIGNAL` (their hook is
installed: a process without it would die of the signal's default action), waits briefly for each one's dump
file to grow, and returns the new text, with the tails of `nccl_trace_rank_*` (base64: torch writes a pickle) and
of the raylet's and the newest workers' logs. Every text is bounded (`FILE_BYTES`, `NODE_BYTES`), so the log the
operator reads fits its evidence bundle.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from grpo_launcher.stackdump import SIGNAL, dump_path, registered

MARK = "GRPO_STACKS "
MISSING_MARK = "GRPO_STACKS_MISSING "
FILE_BYTES = 64 * 1024  # of one dump, one log tail, one flight-recorder file
WORKER_LOG_BYTES = 32 * 1024
NODE_BYTES = 512 * 1024  # of everything one node returns
NEWEST_WORKER_LOGS = 2  # of each kind: worker-*.err and python-core-worker-*.log
NCCL_PREFIX = "nccl_trace_rank_"
RAY_LOGS = Path("/tmp/ray/session_latest/logs")  # Ray's default temp dir, as on the RayCluster's pods
POLL_SECONDS = 0.05


def candidates(directory: str | Path, exclude: Iterable[int] = ()) -> list[int]:
    """Processes visible here whose hook is installed: they catch the signal and have their dump file in
    `directory` (a stale file of a dead pid alone is not enough, nor is the bit alone)."""
    skip = {os.getpid(), *exclude}
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) not in skip:
            pid = int(entry.name)
            if dump_path(directory, pid).exists() and registered(pid):
                pids.append(pid)
    return sorted(pids)


def _send(pid: int) -> bool:
    """Signal `pid` only if it still catches the signal. The pidfd names the process checked, so a pid reused in
    between is never signalled (the kernel answers ESRCH for the one that exited)."""
    assert SIGNAL is not None  # candidates() finds none without it
    try:
        handle = os.pidfd_open(pid)
    except (AttributeError, OSError):
        handle = None
    try:
        if not registered(pid):
            return False
        if handle is not None:
            signal.pidfd_send_signal(handle, SIGNAL)
        else:
            os.kill(pid, SIGNAL)
        return True
    except OSError:
        return False
    finally:
        if handle is not None:
            os.close(handle)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode("utf-8", errors="replace").strip()[:1000]


def _read(path: Path, start: int, limit: int) -> str:
    with path.open("rb") as f:
        f.seek(start)
        data = f.read(limit + 1)
    text = data[:limit].decode("utf-8", errors="replace")
    return text + (f"\n[cut at {limit} bytes]\n" if len(data) > limit else "")


def dump_stacks(
    directory: str | Path,
    wait_seconds: float,
    pids: list[int] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> list[dict[str, Any]]:
    """Signal each registered process (`candidates` unless `pids` is given: any of those not registered is
    skipped) and return, per process signalled, its pid, command line and new dump text; one whose dump has not
    grown and settled within `wait_seconds` says so."""
    chosen = candidates(directory) if pids is None else pids
    before = {pid: _size(dump_path(directory, pid)) for pid in chosen}
    signalled = [pid for pid in chosen if _send(pid)]
    pending, last = set(signalled), dict.fromkeys(signalled, -1)
    deadline = time.monotonic() + wait_seconds
    while pending and time.monotonic() < deadline:
        sleep(POLL_SECONDS)
        for pid in sorted(pending):
            size = _size(dump_path(directory, pid))
            if size > before[pid] and size == last[pid]:  # grown, and unchanged since the last look
                pending.discard(pid)
            last[pid] = size
    out = []
    for pid in signalled:
        path = dump_path(directory, pid)
        text = _read(path, before[pid], FILE_BYTES) if _size(path) > before[pid] else ""
        if pid in pending:
            text += f"[no complete dump within {wait_seconds:.1f} s]\n"
        out.append({"pid": pid, "cmdline": _cmdline(pid), "dump": text})
    return out


def tail_bytes(path: Path, limit: int) -> bytes:
    size = _size(path)
    with path.open("rb") as f:
        f.seek(max(0, size - limit))
        return f.read(limit)


def nccl_traces(directory: str | Path) -> dict[str, str]:
    """torch's flight-recorder dumps (`TORCH_NCCL_DEBUG_INFO_TEMP_FILE` + rank), base64, each its last
    `FILE_BYTES` (docs/integrations/torch.md)."""
    out = {}
    for path in sorted(Path(directory).glob(f"{NCCL_PREFIX}*")):
        with contextlib.suppress(OSError):
            out[path.name] = base64.b64encode(tail_bytes(path, FILE_BYTES)).decode("ascii")
    return out


def _newest(logs: Path, pattern: str, count: int) -> list[Path]:
    found = []
    for path in logs.glob(pattern):
        with contextlib.suppress(OSError):
            found.append((path.stat().st_mtime, path))
    return [p for _, p in sorted(found, reverse=True)[:count]]


def ray_logs_dir() -> Path:
    """This node's Ray log directory: the running Ray's own (the local head's temp dir differs), else Ray's
    default."""
    try:
        from ray._private import worker  # noqa: PLC0415 - only inside a Ray task

        node = worker.global_worker.node
        return Path(node.get_logs_dir_path()) if node is not None else RAY_LOGS
    except Exception:  # outside Ray, or a Ray without it: the default path
        return RAY_LOGS


def log_tails(logs: Path) -> dict[str, str]:
    """The raylet's log and the newest workers' stderr and core-worker logs, each its tail."""
    chosen = [(logs / "raylet.out", FILE_BYTES)]
    for pattern in ("worker-*.err", "python-core-worker-*.log"):
        chosen += [(p, WORKER_LOG_BYTES) for p in _newest(logs, pattern, NEWEST_WORKER_LOGS)]
    out = {}
    for path, limit in chosen:
        with contextlib.suppress(OSError):
            out[path.name] = tail_bytes(path, limit).decode("utf-8", errors="replace")
    return out


def bounded(result: dict[str, Any], limit: int = NODE_BYTES) -> dict[str, Any]:
    """`result` with what passes `limit` bytes (stacks first, then flight-recorder dumps, then logs) replaced by a
    note in `left_out`, so one node's line stays small whatever it holds."""
    used, left_out = 0, []
    kept_stacks = []
    for process in result["processes"]:
        size = len(process["dump"])
        if used + size > limit:
            left_out.append(f"stack of pid {process['pid']} ({size} bytes)")
            kept_stacks.append({**process, "dump": ""})
            continue
        used += size
        kept_stacks.append(process)
    kept: dict[str, dict[str, str]] = {"nccl": {}, "logs": {}}
    for kind in ("nccl", "logs"):
        for name, text in result[kind].items():
            if used + len(text) > limit:
                left_out.append(f"{kind} {name} ({len(text)} bytes)")
                continue
            used += len(text)
            kept[kind][name] = text
    return {**result, "processes": kept_stacks, **kept, "left_out": left_out}


def collect_node(node: str, directory: str, wait_seconds: float) -> dict[str, Any]:
    """What one node holds: its registered processes' stacks, flight-recorder dumps and Ray log tails."""
    result = {
        "node": node,
        "processes": dump_stacks(directory, wait_seconds),
        "nccl": nccl_traces(directory),
        "logs": log_tails(ray_logs_dir()),
    }
    return bounded(result)


def _label(node: dict[str, Any]) -> str:
    """A node as the bundle names it: its host (the pod's name) and the start of its Ray node id."""
    return f"{node.get('NodeManagerHostname') or node.get('NodeManagerAddress')}-{str(node.get('NodeID'))[:8]}"


def run_driver(directory: str, seconds: float) -> int:
    """One task per alive node; a line per node as it answers, and one per node that did not by the deadline."""
    import ray  # noqa: PLC0415 - the image's Ray, only in the job's driver
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: PLC0415

    deadline = time.monotonic() + seconds
    ray.init(log_to_driver=False)
    task = ray.remote(num_cpus=0, max_retries=0)(collect_node)
    wait = min(5.0, max(0.5, seconds / 4))
    pending: dict[Any, str] = {}
    for node in ray.nodes():  # type: ignore[no-untyped-call]
        if node.get("Alive"):
            strategy = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
            pending[task.options(scheduling_strategy=strategy).remote(_label(node), directory, wait)] = _label(node)
    while pending and (left := deadline - time.monotonic()) > 0:
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=left)
        for ref in ready:
            label = pending.pop(ref)
            try:
                print(MARK + json.dumps(ray.get(ref)), flush=True)
            except Exception as exc:  # the node's task failed: say so, go on with the others
                why = f"{type(exc).__name__}: {str(exc)[:500]}"
                print(MISSING_MARK + json.dumps({"node": label, "why": why}), flush=True)
    for label in pending.values():
        why = f"did not answer within {seconds:.0f} s"
        print(MISSING_MARK + json.dumps({"node": label, "why": why}), flush=True)
    sys.stdout.flush()
    os._exit(0)  # not ray.shutdown(): it waits on the tasks a node that never answered still holds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grpo_launcher.stacks", description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, help="the pods' GRPO_STACKS_DIR")
    parser.add_argument("--seconds", type=float, required=True, help="when to stop waiting for nodes")
    args = parser.parse_args(argv)
    return run_driver(args.dir, args.seconds)


if __name__ == "__main__":
    sys.exit(main())
