"""Check results and how the preflight prints them.

Each check yields one ``CheckResult``: a status (pass, warn, fail), a one-line reason and optional numbers.
The operator reads the last line of a failed preflight from the Ray job message, so its shape is fixed:
``preflight failed: <check>: <reason>``, and the process exits with ``PREFLIGHT_FAILED_EXIT``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TextIO

PREFLIGHT_FAILED_EXIT = 3
FAILED_PREFIX = "preflight failed: "


class Status(StrEnum):
    PASS = "pass"  # noqa: S105 (a status, not a password)
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: Status
    reason: str
    data: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        """The human line: ``[pass] shm: /dev/shm is 256.0 GiB (>= 64 GiB)``."""
        return f"[{self.status.value}] {self.name}: {one_line(self.reason)}"


def passed(name: str, reason: str, **data: Any) -> CheckResult:
    return CheckResult(name, Status.PASS, reason, data)


def warned(name: str, reason: str, **data: Any) -> CheckResult:
    return CheckResult(name, Status.WARN, reason, data)


def failed(name: str, reason: str, **data: Any) -> CheckResult:
    return CheckResult(name, Status.FAIL, reason, data)


def one_line(text: str) -> str:
    """Collapse whitespace so every reason stays on one line."""
    return " ".join(text.split())


def gib(n_bytes: float) -> float:
    return n_bytes / 2**30


@dataclass(frozen=True)
class PreflightReport:
    results: tuple[CheckResult, ...]
    seconds: float

    @property
    def failures(self) -> tuple[CheckResult, ...]:
        return tuple(r for r in self.results if r.status is Status.FAIL)

    @property
    def ok(self) -> bool:
        return not self.failures

    def failure_line(self) -> str:
        """The last line of a failed preflight, read by the operator."""
        first, *rest = self.failures
        more = f" (and {len(rest)} more: {', '.join(r.name for r in rest)})" if rest else ""
        return f"{FAILED_PREFIX}{first.name}: {one_line(first.reason)}{more}"

    def summary(self) -> dict[str, Any]:
        return {
            "preflight": "failed" if self.failures else "passed",
            "seconds": round(self.seconds, 2),
            "checks": [
                {"name": r.name, "status": r.status.value, "reason": one_line(r.reason), **r.data} for r in self.results
            ],
        }


def print_report(report: PreflightReport, out: TextIO) -> None:
    """Print the JSON summary, then the verdict; on a fail the last line is the failure line."""
    out.write(json.dumps(report.summary(), sort_keys=True) + "\n")
    if report.ok:
        counts = _counts(report.results)
        out.write(f"preflight passed in {report.seconds:.1f} s ({counts})\n")
    else:
        out.write(report.failure_line() + "\n")
    out.flush()


def _counts(results: Sequence[CheckResult]) -> str:
    return ", ".join(f"{sum(r.status is s for r in results)} {s.value}" for s in Status)
