"""The end-of-run record: what the launcher saw miles log, printed as ONE line when miles exits.

Contract with the operator (its parser is `operator/grpo_operator/status/summary.py`; keep both in step):

* The launcher sets ``GRPO_FAILURE_FILE=<a fresh temp dir>/failure.json`` in miles's environment. A component
  inside miles that ends the run on purpose (e.g. the remote reward client) writes
  ``{"reason": "RewardServiceFailed", "message": "<one line>"}`` there before raising. ``reason`` is one
  CamelCase word; it becomes the GRPORun's Failed reason. A Ray actor does not inherit the driver's
  environment (it gets the job's runtime env) and may run on another node, so the same object may instead be
  printed on one output line after ``GRPO_FAILURE `` (Ray forwards actor output to the driver's); the launcher
  reads both, the file first.
* When miles has exited, the launcher prints as its last stdout line::

      GRPO_RUN_SUMMARY {"version": 1, "exit_code": 0, "first_rollout": 0, "last_rollout": 5, "rollouts_logged": 6,
                        "rollouts": [{"rollout": 5, "raw_reward": 0.5, "repetition_frac": 0.0,
                                      "truncated_ratio": 0.0, "step_time_seconds": 1.2}, ...],
                        "provenance": {...}, "failure": null}

  (``json.dumps``, one line). ``rollouts`` are the last ``MAX_ROLLOUTS`` rollouts in order, a field null when
  miles did not log it; ``provenance`` is what ``provenance.collect`` read at start; ``failure`` is the failure
  file's object, or null when there is none or it does not parse.
* The operator reads the job's log through the Ray Jobs API when the job ends and takes the last such line.

How the launcher sees the metrics: it reads miles's own output (miles runs as its child with stdout and stderr
piped through the launcher, which writes every line on unchanged). miles logs each rollout as dict reprs:
``rollout <id>: {'rollout/raw_reward': ...}`` from the training actor, ``perf <id>: {'rollout/repetition_frac':
..., 'rollout/truncated_ratio': ...}`` from the rollout manager and ``perf <id>: {'perf/step_time': ...}``
(docs/integrations/miles.md: log lines); Ray forwards the actors' lines to the driver's output with a
``(ActorName pid=...)`` prefix. The Prometheus gauges are no substitute: they live in a Ray actor that dies
with the job, so the last rollouts would be lost between two scrapes.
"""

from __future__ import annotations

import ast
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

MARK = "GRPO_RUN_SUMMARY"
FAILURE_FILE_ENV = "GRPO_FAILURE_FILE"
FAILURE_LINE_MARK = "GRPO_FAILURE "
MAX_ROLLOUTS = 100
KEYS = {
    "rollout/raw_reward": "raw_reward",
    "rollout/repetition_frac": "repetition_frac",
    "rollout/truncated_ratio": "truncated_ratio",
    "perf/step_time": "step_time_seconds",
}
_LINE = re.compile(r"\b(?:rollout|perf) (\d+): (\{.*\})\s*$")
_NONFINITE = re.compile(r"(?<![\w'\"])-?(?:nan|inf)(?![\w'\"])")


def parse_metrics_line(line: str) -> tuple[int, dict[str, float]] | None:
    """(rollout id, the keys we keep) of one miles metrics line, or None for any other line."""
    found = _LINE.search(line)
    if found is None:
        return None
    try:
        data = ast.literal_eval(_NONFINITE.sub("None", found.group(2)))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    kept = {
        KEYS[k]: float(v)
        for k, v in data.items()
        if k in KEYS and isinstance(v, int | float) and not isinstance(v, bool)
    }
    return int(found.group(1)), kept


class RolloutLog:
    """The rollouts miles has logged so far (thread-safe: fed by the output pump, read at the end)."""

    def __init__(self) -> None:
        self._rollouts: OrderedDict[int, dict[str, float]] = OrderedDict()
        self._first: int | None = None
        self._count = 0
        self._lock = threading.Lock()
        self.failure: dict[str, str] | None = None  # the first GRPO_FAILURE line's object

    def feed(self, line: str) -> None:
        at = line.find(FAILURE_LINE_MARK)
        if at >= 0 and self.failure is None:
            self.failure = _failure_object(line[at + len(FAILURE_LINE_MARK) :])
            return
        parsed = parse_metrics_line(line)
        if parsed is None:
            return
        rollout, values = parsed
        with self._lock:
            if rollout not in self._rollouts:
                self._count += 1
                self._first = rollout if self._first is None else self._first
                self._rollouts[rollout] = {}
                while len(self._rollouts) > MAX_ROLLOUTS:
                    self._rollouts.popitem(last=False)
            self._rollouts[rollout].update(values)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            rollouts = [{"rollout": r, **{f: v.get(f) for f in KEYS.values()}} for r, v in self._rollouts.items()]
            return {
                "first_rollout": self._first,
                "last_rollout": rollouts[-1]["rollout"] if rollouts else None,
                "rollouts_logged": self._count,
                "rollouts": rollouts,
            }


def _failure_object(text: str) -> dict[str, str] | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("reason"), str):
        return None
    return {"reason": data["reason"], "message": " ".join(str(data.get("message", "")).split())}


def read_failure(path: Path) -> dict[str, str] | None:
    """The failure file's {"reason", "message"}, or None when absent or malformed."""
    try:
        return _failure_object(path.read_text(encoding="utf-8"))
    except OSError:
        return None


def summary_line(
    exit_code: int, rollouts: RolloutLog, provenance: Mapping[str, str], failure: dict[str, str] | None
) -> str:
    payload = {
        "version": 1,
        "exit_code": exit_code,
        **rollouts.snapshot(),
        "provenance": dict(provenance),
        "failure": failure,
    }
    return f"{MARK} {json.dumps(payload, sort_keys=True)}"
