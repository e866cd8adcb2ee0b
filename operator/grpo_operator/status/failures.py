"""Why a job failed, read from its log: the failure class (a `Reason`), the line that gave it away, the node that
line came from, the node the evidence blames (if any), and whether a restart from the checkpoint can help. Pure.
Each class is a few signatures, real lines of the pinned miles, Megatron, SGLang, NCCL, CUDA, torch and Ray
(docs/integrations/failures.md names where each comes from and the test that reads it). A failure shows up as a
cascade (one rank's GPU faults or runs out of memory, its peers report the remote error or time out in their
collective, the rollout engines lose them) and its cause is printed first, so the EARLIEST line of the log that
matches any signature gives the class: the position in the log stands for time (the driver prints each process's
lines as Ray forwards them; the lines share no clock), and the class order only breaks a tie within one line. A
node is blamed only on evidence against it: a CUDA error the failing rank printed about its own GPU, Ray's own line
about the node it marked dead, or a majority of the processes that printed an NCCL watchdog timeout sitting on it;
never a peer's report (`ncclRemoteError`, an IB completion error) nor whichever watchdog line came first. For an
NCCL or fabric failure, the log's NCCL lines with their context go into the failed job's evidence bundle.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from grpo_operator.api.status import Reason
from grpo_operator.status.observation import rfc3339

R = Reason
LINE_CHARS = 300
# Fabric, node and process deaths, host memory, a GPU's hardware fault, a lost Ray head: the same input can pass on
# a fresh attempt (on another node, when the failure blamed one).
RETRYABLE = frozenset(
    {
        R.NCCL_TIMEOUT,
        R.FABRIC_ERROR,
        R.NODE_LOST,
        R.ROLLOUT_ENGINE_DIED,
        R.HOST_OUT_OF_MEMORY,
        R.GPU_HARDWARE_ERROR,
        R.HEAD_LOST,
    }
)
FABRIC = frozenset({R.NCCL_TIMEOUT, R.FABRIC_ERROR})
CONTEXT_LINES = 5  # kept before and after each NCCL line of a fabric failure's log
FABRIC_MAX_LINES = 400


class Blame(Enum):
    """Which node, if any, a class's line is evidence against."""

    NONE = "none"  # a peer's report, a consequence, or the run's own demand (memory, data, reward)
    OWN = "own"  # the node of the process that printed it, about its own GPU (Ray's prefix names the node)
    DEAD = "dead"  # the node the line says Ray marked dead (the address in the line)
    WATCHDOG = "watchdog"  # the node most of the processes that timed out sit on


@dataclass(frozen=True)
class Signature:
    reason: Reason
    what: str  # what the class means, as the message starts
    pattern: re.Pattern[str]
    blame: Blame = Blame.NONE


def _sig(reason: Reason, what: str, *patterns: str, blame: Blame = Blame.NONE) -> Signature:
    return Signature(reason, what, re.compile("|".join(f"(?:{p})" for p in patterns), re.MULTILINE), blame)


# The CUDA runtime's own words (cudaGetErrorString) as torch (`CUDA error: ...`), NCCL (`Cuda failure '...'`) and
# Triton print them, and the driver API's names as cuda-python and Triton print them.
SIGNATURES: tuple[Signature, ...] = (
    _sig(
        R.GPU_HARDWARE_ERROR,
        "a GPU's memory or NVLink failed",
        r"uncorrectable ECC error encountered",
        r"uncorrectable NVLink error detected during the execution",
        r"CUDA_ERROR_ECC_UNCORRECTABLE",
        r"CUDA_ERROR_NVLINK_UNCORRECTABLE",
        blame=Blame.OWN,
    ),
    _sig(
        R.CUDA_KERNEL_ERROR,
        "a CUDA kernel faulted",
        r"an illegal memory access was encountered",
        r"CUDA_ERROR_ILLEGAL_ADDRESS",
        r"an illegal instruction was encountered",
        r"CUDA error: misaligned address",
        r"CUDA error: hardware stack error",
        r"CUDA error: invalid program counter",
        r"unspecified launch failure",
        r"device-side assert triggered",
    ),
    _sig(
        R.CUDA_OUT_OF_MEMORY,
        "a GPU ran out of memory",
        r"CUDA out of memory\.",
        r"CUDA error: out of memory",
    ),
    _sig(
        R.HOST_OUT_OF_MEMORY,
        "a node ran out of host memory",
        r"killed due to the node running low on memory",
        r"ray\.exceptions\.OutOfMemoryError",
    ),
    _sig(R.CHECKPOINT_WRITE_FAILED, "a write failed: no space left on device", r"\[Errno 28\] No space left on device"),
    _sig(
        R.INPUT_ERROR,
        "the input data cannot be read",
        r"Prompt dataset path '[^']*' does not exist",
        r"Unsupported file format: .* Supported formats are \.jsonl and \.parquet",
        r"Unsupported content type: .*, expected str or list of dicts",
    ),
    _sig(
        R.REWARD_SERVICE_FAILED,
        "the reward service could not score",
        r"GRPO_FAILURE \{\"reason\": \"RewardServiceFailed\"",
        r", in remote_rm$",
    ),
    _sig(
        R.NODE_LOST,
        "a node was lost",
        r"has been marked dead because the detector has missed too many heartbeats",
        r"The actor died because its node has died",
        blame=Blame.DEAD,
    ),
    _sig(
        R.NCCL_TIMEOUT,
        "an NCCL collective timed out",
        r"Watchdog caught collective operation timeout",
        blame=Blame.WATCHDOG,
    ),
    _sig(
        R.FABRIC_ERROR,
        "the network fabric failed",
        r"remote process exited or there was a network error",
        r"NET/IB: Got completion from peer .* with status=",
        r"NCCL error.*unhandled system error",
    ),
    _sig(
        R.ROLLOUT_ENGINE_DIED,
        "a rollout engine died",
        r"Health check failed for rollout engine \d+",
        r"class_name: SGLangEngine",
        r"Received sigquit from a child process\. It usually means the child failed\.",
    ),
)

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Ray's prefix of a line another process printed (`_private/worker.py` print_worker_logs): `(Name pid=N, ip=IP)`,
# `(raylet, ip=IP)`, and without `, ip=IP` for a process on the driver's own node.
_RAY_PREFIX = re.compile(
    r"^\s*\((?:(?:[^()\s]+ )?pid=(?P<pid>\d+)|(?P<daemon>raylet))(?:, ip=(?P<ip>\d{1,3}(?:\.\d{1,3}){3}))?\)"
)
_DEAD_ADDRESS = re.compile(r"\baddress: (\d{1,3}(?:\.\d{1,3}){3})\b")
_WATCHDOG = re.compile(r"\[Rank (\d+)\] Watchdog caught .*OpType=(\w+).* ran for (\d+) milliseconds")


@dataclass(frozen=True)
class Classification:
    reason: Reason
    line: str  # the log line the signature matched, cut to LINE_CHARS
    node: str | None  # the IP of the node that line came from (Ray's prefix; the driver's node for one without ip=)
    summary: str  # one phrase: what failed, where
    blamed: str | None = None  # the IP of the node the evidence is against (`Blame`), None when it names none
    evidence: str = ""  # why that node, one phrase

    @property
    def retryable(self) -> bool:
        return self.reason in RETRYABLE

    @property
    def message(self) -> str:
        return f"{self.summary}: {self.line}"


def _line_at(text: str, at: int) -> str:
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    return _ANSI.sub("", text[start : end if end >= 0 else len(text)]).strip()


def _process(line: str, local_ip: str | None) -> tuple[str | None, str | None]:
    """(the process, its node's IP) of a line by Ray's prefix; (None, None) for the driver's own lines."""
    found = _RAY_PREFIX.match(line)
    if found is None:
        return None, None
    ip = found.group("ip") or local_ip
    return f"{found.group('pid') or found.group('daemon')}@{ip or 'driver node'}", ip


def _summary(sig: Signature, line: str, node: str | None) -> str:
    where = f" on node {node}" if node else ""
    watchdog = _WATCHDOG.search(line) if sig.reason is R.NCCL_TIMEOUT else None
    if watchdog is not None:
        rank, op, millis = watchdog.groups()
        return f"rank {rank}{where} waited {int(millis) // 1000} s in {op}"
    return f"{sig.what}{where}"


def _earliest(text: str) -> tuple[Signature, int] | None:
    """The signature of the earliest line any signature matches, and where it matched; within one line, the
    first class of `SIGNATURES`."""
    best: tuple[tuple[int, int], Signature, int] | None = None
    for order, sig in enumerate(SIGNATURES):
        found = sig.pattern.search(text)
        if found is None:
            continue
        key = (text.rfind("\n", 0, found.start()) + 1, order)
        if best is None or key < best[0]:
            best = (key, sig, found.start())
    return (best[1], best[2]) if best is not None else None


def _watchdog_majority(text: str, sig: Signature, local_ip: str | None) -> tuple[str | None, str]:
    """The node more than half of the processes that printed a watchdog timeout sit on, each process counted once
    (by Ray's prefix: a rank prints one per process group, the driver may print it again unprefixed), of two or
    more. The watchdog fires in a rank that waits: on a hang every rank times out and the lines spread over every
    node; one node's majority says the collective that hung was that node's own. A lone line is only the first
    waiter to give up."""
    processes: dict[str, str | None] = {}
    for raw in text.splitlines():
        line = _ANSI.sub("", raw)
        key, ip = _process(line, local_ip) if sig.pattern.search(line) else (None, None)
        if key is not None:
            processes.setdefault(key, ip)
    counts = Counter(ip for ip in processes.values() if ip is not None)
    if not counts:
        return None, ""
    ip, most = counts.most_common(1)[0]
    if len(processes) < 2 or most * 2 <= len(processes):
        return None, ""
    return ip, f"{most} of the {len(processes)} processes whose NCCL watchdog timed out ran there"


def _blamed(sig: Signature, text: str, line: str, node: str | None, local_ip: str | None) -> tuple[str | None, str]:
    if sig.blame is Blame.OWN and node is not None:
        return node, "its own process printed the error"
    if sig.blame is Blame.DEAD:
        dead = _DEAD_ADDRESS.search(line)
        return (dead.group(1), "Ray marked it dead") if dead else (None, "")
    if sig.blame is Blame.WATCHDOG:
        return _watchdog_majority(text, sig, local_ip)
    return None, ""


def classify(text: str, local_ip: str | None = None) -> Classification | None:
    """The failure class of the earliest line of the log that shows one, or None when no signature matches.
    `local_ip`: the driver's node, where Ray prints a process's lines without `ip=`."""
    earliest = _earliest(text)
    if earliest is None:
        return None
    sig, at = earliest
    line = _line_at(text, at)
    node = _process(line, local_ip)[1]
    blamed, evidence = _blamed(sig, text, line, node, local_ip)
    return Classification(sig.reason, line[:LINE_CHARS], node, _summary(sig, line, node), blamed, evidence)


def oom_killed(killed: str, at: datetime) -> Classification:
    """The class of a failure that follows the kernel's OOM kill of one of the run's containers, as the kubelet
    reports it (`killed`: "pod <p> container <c> on node <n>"): the kernel's own word, where Ray's memory monitor
    is off (render/raycluster.py, docs/integrations/ray.md) and the log only shows what the kill caused. The node
    is not blamed: the memory is the run's own demand, the same on any node."""
    line = f"the kubelet reports {killed} OOMKilled at {rfc3339(at)}"
    return Classification(R.HOST_OUT_OF_MEMORY, line, None, "a pod ran out of host memory")


_NCCL_WORD = re.compile(r"NCCL|ProcessGroupNCCL|c10d", re.IGNORECASE)


def fabric_lines(text: str, reason: str) -> str:
    """For an NCCL or fabric failure, the log's lines that name NCCL or match the class's signature, each with
    `CONTEXT_LINES` around it, as `grep -C` prints them (`--` between groups); the last `FABRIC_MAX_LINES`."""
    sig = next((s for s in SIGNATURES if s.reason == reason), None)
    if reason not in FABRIC or sig is None:
        return ""
    lines = [_ANSI.sub("", line) for line in text.splitlines()]
    hits = [i for i, line in enumerate(lines) if _NCCL_WORD.search(line) or sig.pattern.search(line)]
    out: list[str] = []
    end = -1
    for i in hits:
        start = max(i - CONTEXT_LINES, end + 1)
        if out and start > end + 1:
            out.append("--")
        stop = min(i + CONTEXT_LINES, len(lines) - 1)
        out.extend(lines[start : stop + 1])
        end = max(end, stop)
    kept = out[-FABRIC_MAX_LINES:]
    return "\n".join(kept) + "\n" if kept else ""
