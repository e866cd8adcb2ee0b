"""Why a job failed, read from its log: the failure class (a `Reason`), the line that gave it away, the node that
line came from, and whether a restart from the checkpoint can help. Pure. Each class is a few signatures, real
lines of the pinned miles, Megatron, SGLang, NCCL, torch and Ray (docs/integrations/failures.md names where each
comes from and the test that reads it). A failure shows up as a cascade (one rank runs out of memory, the others
time out in their collective, the rollout engines lose their peers), so the classes are tried from the most
specific cause to the most generic consequence and the first class found anywhere in the log wins. For an NCCL or
fabric failure, the log's NCCL lines with their context go into the failed job's evidence bundle.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from grpo_operator.api.status import Reason

R = Reason
LINE_CHARS = 300
# Fabric, node and process deaths, and host memory pressure: the same input can pass on a fresh attempt.
RETRYABLE = frozenset(
    {R.NCCL_TIMEOUT, R.FABRIC_ERROR, R.NODE_LOST, R.ROLLOUT_ENGINE_DIED, R.HOST_OUT_OF_MEMORY, R.HEAD_LOST}
)
FABRIC = frozenset({R.NCCL_TIMEOUT, R.FABRIC_ERROR})
CONTEXT_LINES = 5  # kept before and after each NCCL line of a fabric failure's log
FABRIC_MAX_LINES = 400


@dataclass(frozen=True)
class Signature:
    reason: Reason
    what: str  # what the class means, as the message starts
    pattern: re.Pattern[str]


def _sig(reason: Reason, what: str, *patterns: str) -> Signature:
    return Signature(reason, what, re.compile("|".join(f"(?:{p})" for p in patterns), re.MULTILINE))


SIGNATURES: tuple[Signature, ...] = (
    _sig(R.CUDA_OUT_OF_MEMORY, "a GPU ran out of memory", r"CUDA out of memory\.", r"CUDA error: out of memory"),
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
    ),
    _sig(R.NCCL_TIMEOUT, "an NCCL collective timed out", r"Watchdog caught collective operation timeout"),
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
_RAY_PREFIX_IP = re.compile(r"\bip=(\d{1,3}(?:\.\d{1,3}){3})\)")
_WATCHDOG = re.compile(r"\[Rank (\d+)\] Watchdog caught .*OpType=(\w+).* ran for (\d+) milliseconds")


@dataclass(frozen=True)
class Classification:
    reason: Reason
    line: str  # the log line the signature matched, cut to LINE_CHARS
    node: str | None  # the node's IP from Ray's `(Actor pid=..., ip=...)` prefix of that line
    summary: str  # one phrase: what failed, where

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


def _summary(sig: Signature, line: str, node: str | None) -> str:
    where = f" on node {node}" if node else ""
    watchdog = _WATCHDOG.search(line) if sig.reason is R.NCCL_TIMEOUT else None
    if watchdog is not None:
        rank, op, millis = watchdog.groups()
        return f"rank {rank}{where} waited {int(millis) // 1000} s in {op}"
    return f"{sig.what}{where}"


def classify(text: str) -> Classification | None:
    """The most specific failure class the log shows, or None when no signature matches."""
    for sig in SIGNATURES:
        found = sig.pattern.search(text)
        if found is None:
            continue
        line = _line_at(text, found.start())
        ip = _RAY_PREFIX_IP.search(line)
        node = ip.group(1) if ip else None
        return Classification(sig.reason, line[:LINE_CHARS], node, _summary(sig, line, node))
    return None


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
