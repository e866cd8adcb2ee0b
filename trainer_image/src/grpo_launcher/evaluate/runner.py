"""The evaluation loop: every (prompt, sample) request through a bounded pool, scored as it returns.

At most ``concurrency`` requests are in flight (daemon threads, so an abort does not wait for slow ones).
Responses are scored on the calling thread (math_verify's timeouts need the main thread). When the failed
requests pass ``max_error_fraction`` of all requests, the result can no longer be trusted as accuracy, so the
run stops at once and reports ``aborted``. pass@k is per prompt, keyed on the prompt's position in the file.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from grpo_launcher.evaluate.client import RequestFailedError, SamplingParams
from grpo_launcher.evaluate.dataset import EvalItem
from grpo_launcher.evaluate.scoring import parse_label, pass_at_k, score

ChatFn = Callable[[Sequence[dict[str, str]]], tuple[str, str]]
MAX_ERRORS_KEPT = 20


@dataclass(frozen=True)
class EvalSettings:
    samples: int
    ks: tuple[int, ...]
    concurrency: int
    max_error_fraction: float
    params: SamplingParams


@dataclass
class _Prompt:
    item: EvalItem
    gold: list[Any]
    correct: int = 0
    scored: int = 0
    errors: int = 0
    truncated: int = 0  # responses cut at max_tokens (finish_reason "length")
    answers: list[str] = field(default_factory=list)


def _pool(
    items: Sequence[EvalItem], samples: int, concurrency: int, chat_fn: ChatFn
) -> tuple[queue.Queue[tuple[int, int, str, str, str]], threading.Event]:
    tasks: queue.Queue[tuple[int, int]] = queue.Queue()
    for item in items:
        for sample in range(samples):
            tasks.put((item.index, sample))
    results: queue.Queue[tuple[int, int, str, str, str]] = queue.Queue()
    stop = threading.Event()

    def worker() -> None:
        while not stop.is_set():
            try:
                index, sample = tasks.get_nowait()
            except queue.Empty:
                return
            try:
                content, finish = chat_fn(items[index].messages)
                results.put((index, sample, content, finish, ""))
            except RequestFailedError as exc:
                results.put((index, sample, "", "", str(exc)))
            except Exception as exc:  # a bug must not hang the loop waiting for this result
                results.put((index, sample, "", "", f"{type(exc).__name__}: {exc}"))

    for _ in range(min(concurrency, len(items) * samples)):
        threading.Thread(target=worker, daemon=True).start()
    return results, stop


def evaluate(items: Sequence[EvalItem], settings: EvalSettings, chat_fn: ChatFn) -> dict[str, Any]:
    """Run the evaluation and return the result document (``status`` is completed or aborted)."""
    started = time.monotonic()
    prompts = [_Prompt(item, parse_label(item.label)) for item in items]
    total = len(items) * settings.samples
    allowed_errors = int(settings.max_error_fraction * total)
    results, stop = _pool(items, settings.samples, settings.concurrency, chat_fn)
    errors: list[str] = []
    error_count = 0
    status, reason = "completed", ""
    for _ in range(total):
        index, sample, content, finish, error = results.get()
        prompt = prompts[index]
        if error:
            error_count += 1
            prompt.errors += 1
            if len(errors) < MAX_ERRORS_KEPT:
                errors.append(f"prompt {index} sample {sample}: {error}")
            if error_count > allowed_errors:
                stop.set()
                status = "aborted"
                reason = (
                    f"{error_count} of {total} requests failed, more than the allowed "
                    f"{settings.max_error_fraction:.1%} ({allowed_errors}); accuracy would not be meaningful"
                )
                break
            continue
        ok, answer = score(content, prompt.gold)
        prompt.scored += 1
        prompt.correct += ok
        prompt.answers.append(answer)
        prompt.truncated += finish == "length"
    return _document(
        prompts=prompts,
        settings=settings,
        total=total,
        error_count=error_count,
        errors=errors,
        status=status,
        reason=reason,
        seconds=time.monotonic() - started,
    )


def _document(
    *,
    prompts: list[_Prompt],
    settings: EvalSettings,
    total: int,
    error_count: int,
    errors: list[str],
    status: str,
    reason: str,
    seconds: float,
) -> dict[str, Any]:
    per_prompt = []
    sums: dict[int, list[float]] = {k: [] for k in settings.ks}
    for p in prompts:
        values: dict[str, float | None] = {}
        for k in settings.ks:
            value = pass_at_k(p.scored, p.correct, k) if p.scored >= k else None
            values[str(k)] = value
            if value is not None:
                sums[k].append(value)
        per_prompt.append(
            {
                "index": p.item.index,
                "label": p.item.label,
                "samples_scored": p.scored,
                "correct": p.correct,
                "errors": p.errors,
                "truncated": p.truncated,
                "pass_at_k": values,
                "answers": p.answers,
            }
        )
    scored = sum(p.scored for p in prompts)
    correct = sum(p.correct for p in prompts)
    metrics = {
        "prompts": len(prompts),
        "samples_per_prompt": settings.samples,
        "requests": total,
        "samples_scored": scored,
        "errors": error_count,
        "truncated": sum(p.truncated for p in prompts),
        "error_fraction": error_count / total if total else 0.0,
        "accuracy": correct / scored if scored else None,
        "pass_at_k": {str(k): (sum(v) / len(v) if v else None) for k, v in sums.items()},
        "prompts_counted_for_k": {str(k): len(v) for k, v in sums.items()},
    }
    return {
        "status": status,
        "reason": reason,
        "seconds": round(seconds, 2),
        "metrics": metrics,
        "errors": errors,
        "prompts": per_prompt,
    }
