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
                        "dropped_keys": [], "provenance": {...}, "failure": null,
                        "evals": [{"rollout": 0, "name": "aime", "score": 0.4, "truncated_ratio": 0.0,
                                   "none_reward_ratio": 0.0}, ...],
                        "outputs": {"checkpoint_iteration": 5, "checkpoint_path": ".../iter_0000005",
                                    "huggingface_path": null, "huggingface_verified": null}}

  (``json.dumps``, one line). ``rollouts`` are the last ``MAX_ROLLOUTS`` rollouts in order, a field null when
  miles did not log it or logged a value that could not be read; ``dropped_keys`` names the kept keys (or
  ``<unreadable key>``) whose value could not be read in some line, the rest of that line still counts;
  ``provenance`` is what ``provenance.collect`` read at start; ``failure`` is the failure
  file's object, or null when there is none or it does not parse; ``evals`` the last ``MAX_EVALS`` evaluations
  miles logged (``eval <id>: {'eval/<name>': .., 'eval/<name>-truncated_ratio': .., 'eval/<name>-none_reward_ratio':
  ..}``, ``ray/rollout/metrics.py:53``), one item per eval set; ``outputs`` what ``grpo_launcher.outputs`` found.
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
import math
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
MAX_EVALS = 100
KEYS = {
    "rollout/raw_reward": "raw_reward",
    "rollout/repetition_frac": "repetition_frac",
    "rollout/truncated_ratio": "truncated_ratio",
    "perf/step_time": "step_time_seconds",
}
_LINE = re.compile(r"\b(?:rollout|perf) (\d+): (\{.*\})\s*$")
_EVAL_LINE = re.compile(r"\beval (\d+): (\{.*\})\s*$")
# miles's eval keys of one set (operator/grpo_operator/status/evaluation.py reads the same): the score and two ratios
_EVAL_KEY = re.compile(r"^eval/([a-z0-9][a-z0-9_-]{0,62}?)(-truncated_ratio|-none_reward_ratio)?$")
_EVAL_FIELDS = {"": "score", "-truncated_ratio": "truncated_ratio", "-none_reward_ratio": "none_reward_ratio"}
# The numeric types miles's helpers put in these dicts, by the name their repr calls: numpy scalars
# (`np.float64(0.5)` under numpy 2), numpy arrays (`array([0.5])`) and torch scalars (`tensor(0.5)`).
_NUMERIC_CALLS = frozenset(
    {"float64", "float32", "float16", "int64", "int32", "int16", "int8", "uint8", "array", "tensor", "float", "int"}
)
_NONFINITE = {"nan": math.nan, "inf": math.inf}
UNREADABLE_KEY = "<unreadable key>"


def _split_top_level(body: str, sep: str) -> list[str]:
    """`body` cut at each `sep` outside brackets and quotes (a dict repr's items, or an item's key and value)."""
    parts, depth, quote, start, i = [], 0, "", 0, 0
    while i < len(body):
        ch = body[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(body[start:i])
            start = i + 1
            if sep == ":":
                break
        i += 1
    parts.append(body[start:])
    return parts


def _number(node: ast.expr) -> float | None:
    """The one number an expression of miles's reprs denotes, without evaluating anything."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = _number(node.operand)
        return None if inner is None else (-inner if isinstance(node.op, ast.USub) else inner)
    if isinstance(node, ast.Name) and node.id in _NONFINITE:
        return _NONFINITE[node.id]
    if isinstance(node, ast.Attribute) and node.attr in _NONFINITE:  # np.nan, math.inf
        return _NONFINITE[node.attr]
    if isinstance(node, ast.Call) and node.args:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in _NUMERIC_CALLS:
            return _number(node.args[0])
    if isinstance(node, ast.List | ast.Tuple) and len(node.elts) == 1:  # a one-element array's contents
        return _number(node.elts[0])
    return None


def _value(text: str) -> float | None:
    try:
        return _number(ast.parse(text.strip(), mode="eval").body)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def _key(text: str) -> str | None:
    try:
        key = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return key if isinstance(key, str) else None


def parse_metrics_line_keys(line: str) -> tuple[int, dict[str, float], list[str]] | None:
    """(rollout id, the keys we keep, the keys we keep whose value could not be read) of one miles metrics line,
    or None for any other line. An item that cannot be read costs only itself."""
    found = _LINE.search(line)
    if found is None:
        return None
    kept: dict[str, float] = {}
    dropped: list[str] = []
    body = found.group(2)[1:-1]
    for item in _split_top_level(body, ","):
        if not item.strip():
            continue
        key_text, *rest = _split_top_level(item, ":")
        key = _key(key_text)
        if key is None or not rest:
            dropped.append(UNREADABLE_KEY)
            continue
        if key not in KEYS:
            continue
        number = _value(rest[0])
        if number is None:
            dropped.append(key)
        elif math.isfinite(number):  # a nan/inf miles logged is no reading (JSON has no such number)
            kept[KEYS[key]] = number
    return int(found.group(1)), kept, dropped


def parse_eval_line(line: str) -> list[dict[str, Any]] | None:
    """The evaluations of one `eval <id>: {...}` line, one per eval set, or None for any other line."""
    found = _EVAL_LINE.search(line)
    if found is None:
        return None
    sets: dict[str, dict[str, Any]] = {}
    for item in _split_top_level(found.group(2)[1:-1], ","):
        key_text, *rest = _split_top_level(item, ":")
        key = _key(key_text) if item.strip() else None
        matched = _EVAL_KEY.match(key) if key is not None and key != "eval/step" and rest else None
        number = _value(rest[0]) if matched is not None else None
        if matched is None or number is None or not math.isfinite(number):
            continue
        entry = sets.setdefault(matched.group(1), {"rollout": int(found.group(1)), "name": matched.group(1)})
        entry[_EVAL_FIELDS[matched.group(2) or ""]] = number
    return [{"score": None, "truncated_ratio": None, "none_reward_ratio": None, **e} for _, e in sorted(sets.items())]


def parse_metrics_line(line: str) -> tuple[int, dict[str, float]] | None:
    """(rollout id, the keys we keep) of one miles metrics line, or None for any other line."""
    parsed = parse_metrics_line_keys(line)
    return None if parsed is None else parsed[:2]


class RolloutLog:
    """The rollouts miles has logged so far (thread-safe: fed by the output pump, read at the end)."""

    def __init__(self) -> None:
        self._rollouts: OrderedDict[int, dict[str, float]] = OrderedDict()
        self._first: int | None = None
        self._count = 0
        self._lock = threading.Lock()
        self.failure: dict[str, str] | None = None  # the first GRPO_FAILURE line's object
        self._dropped: set[str] = set()
        self._evals: list[dict[str, Any]] = []

    def feed(self, line: str) -> None:
        at = line.find(FAILURE_LINE_MARK)
        if at >= 0 and self.failure is None:
            self.failure = _failure_object(line[at + len(FAILURE_LINE_MARK) :])
            return
        evals = parse_eval_line(line)
        if evals is not None:
            with self._lock:
                self._evals = (self._evals + evals)[-MAX_EVALS:]
            return
        parsed = parse_metrics_line_keys(line)
        if parsed is None:
            return
        rollout, values, dropped = parsed
        with self._lock:
            self._dropped.update(dropped)
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
                "dropped_keys": sorted(self._dropped),
                "evals": list(self._evals),
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
    exit_code: int,
    rollouts: RolloutLog,
    provenance: Mapping[str, str],
    failure: dict[str, str] | None,
    outputs: Mapping[str, Any] | None = None,
) -> str:
    payload = {
        "version": 1,
        "exit_code": exit_code,
        **rollouts.snapshot(),
        "provenance": dict(provenance),
        "failure": failure,
        "outputs": dict(outputs) if outputs is not None else None,
    }
    return f"{MARK} {json.dumps(payload, sort_keys=True)}"
