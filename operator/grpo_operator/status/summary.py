"""The end-of-run record: the one `GRPO_RUN_SUMMARY {json}` line the trainer launcher prints last. Pure parsing.

miles's gauges die with the job (docs/integrations/miles.md), so the rollouts between the operator's last scrape
and the job's end are never scraped; the launcher collects the `rollout <id>: {...}` and `perf <id>: {...}` lines
miles logs and prints them, one line of `json.dumps`, as the job's last output:

    GRPO_RUN_SUMMARY {"version": 1, "exit_code": 0, "first_rollout": 0, "last_rollout": 5, "rollouts_logged": 6,
                      "rollouts": [{"rollout": 5, "raw_reward": 0.5, "repetition_frac": 0.0, ...}, ...],
                      "provenance": {"miles_commit": "...", "ray": "2.x", ...}, "failure": null}

`rollouts` holds the last `MAX_ROLLOUTS` in order (a value is null when miles did not log it); `failure` is null or
the `{"reason", "message"}` a component inside miles wrote before ending the run on purpose; `evals` the
evaluations miles logged (`{"rollout", "name", "score", "truncated_ratio", "none_reward_ratio"}`, the last
`MAX_EVALS`), `outputs` the last checkpoint and Hugging Face export the launcher found. The LAST such line of
the job's log counts; a line that does not parse is ignored (the run then ends unverified rather than on a guess).
"""

from __future__ import annotations

import json
from typing import Any

from grpo_operator.status.observation import EvalReading, Failure, Outputs, Resume, RunSummary, TrainerMetrics

MARK = "GRPO_RUN_SUMMARY "
MAX_ROLLOUTS = 100
MAX_EVALS = 100
_FIELDS = ("raw_reward", "repetition_frac", "truncated_ratio", "step_time_seconds")


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _rollout(item: Any) -> TrainerMetrics | None:
    if not isinstance(item, dict) or not isinstance(item.get("rollout"), int):
        return None
    reward, repetition, truncated, step = (_number(item.get(k)) for k in _FIELDS)
    return TrainerMetrics(int(item["rollout"]), reward, repetition, truncated, step)


def _eval(item: Any) -> EvalReading | None:
    if not isinstance(item, dict) or _int(item.get("rollout")) is None or not isinstance(item.get("name"), str):
        return None
    ratios = (_number(item.get(k)) for k in ("truncated_ratio", "none_reward_ratio"))
    return EvalReading(item["name"][:63], int(item["rollout"]), _number(item.get("score")), *ratios)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(value: Any) -> str | None:
    return value[:1024] if isinstance(value, str) and value else None


def _outputs(raw: Any) -> Outputs | None:
    if not isinstance(raw, dict):
        return None
    verified = raw.get("huggingface_verified")
    return Outputs(
        checkpoint_iteration=_int(raw.get("checkpoint_iteration")),
        checkpoint_path=_text(raw.get("checkpoint_path")),
        huggingface_path=_text(raw.get("huggingface_path")),
        huggingface_verified=verified if isinstance(verified, bool) else None,
    )


def _failure(raw: Any) -> Failure | None:
    if not isinstance(raw, dict) or not isinstance(raw.get("reason"), str) or not raw["reason"].isalnum():
        return None
    message = raw.get("message")
    text = " ".join(str(message).split())[:1000] if message is not None else ""
    return Failure(raw["reason"][:64], text)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _summary(data: dict[str, Any]) -> RunSummary:
    rollouts = tuple(r for r in (_rollout(i) for i in data.get("rollouts") or []) if r is not None)
    raw = data.get("provenance")
    provenance = {str(k): str(v)[:256] for k, v in raw.items()} if isinstance(raw, dict) else {}
    return RunSummary(
        exit_code=_int(data.get("exit_code")),
        first_rollout=_int(data.get("first_rollout")),
        last_rollout=_int(data.get("last_rollout")),
        rollouts=rollouts[-MAX_ROLLOUTS:],
        provenance=provenance,
        failure=_failure(data.get("failure")),
        evals=tuple(e for e in (_eval(i) for i in _list(data.get("evals"))) if e is not None)[-MAX_EVALS:],
        outputs=_outputs(data.get("outputs")),
    )


def parse(text: str) -> RunSummary | None:
    """The last well-formed summary line of a job log, or None."""
    for line in reversed(text.splitlines()):
        data = _object_after(line, MARK)
        if data is not None and data.get("version") == 1:
            return _summary(data)
    return None


def _object_after(line: str, mark: str) -> dict[str, Any] | None:
    """The JSON object after `mark` in `line`; None when the mark is not there or what follows is no object."""
    at = line.find(mark)
    if at < 0:
        return None
    try:
        data = json.loads(line[at + len(mark) :])
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


RESUME_MARK = "GRPO_RESUME "


def parse_resume(text: str) -> Resume | None:
    """The launcher's `GRPO_RESUME {"iteration": N|null, "dataState": bool, "load": ...}` line (grpo_launcher.launch
    `resume_line`), printed once before miles starts: the checkpoint miles resumes from. None until it is there."""
    for line in text.splitlines():
        data = _object_after(line, RESUME_MARK)
        if data is None:
            continue
        iteration = data.get("iteration")
        if iteration is not None and (isinstance(iteration, bool) or not isinstance(iteration, int) or iteration < 0):
            continue
        return Resume(iteration, data.get("dataState") is True)
    return None
