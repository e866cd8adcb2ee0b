"""The evaluation set: JSONL rows with a prompt (a chat message list or a string) and a label.

The AIME-2024 file has exactly ``prompt`` and ``label`` per line, 30 lines, and labels may be
numbers; both keys are configurable. A bad line is reported with its line number, the key and the fix.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class DatasetError(Exception):
    """An evaluation file that cannot be used; the message is for a user."""


@dataclass(frozen=True)
class EvalItem:
    index: int  # 0-based position in the file; pass@k is keyed on it, never on an optional id field
    messages: tuple[dict[str, str], ...]
    label: str


def _messages(value: Any, line: int, key: str) -> tuple[dict[str, str], ...]:
    if isinstance(value, str):
        return ({"role": "user", "content": value},)
    if (
        isinstance(value, list)
        and value
        and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value
        )
    ):
        return tuple({"role": m["role"], "content": m["content"]} for m in value)
    raise DatasetError(
        f"line {line}: {key!r} is {json.dumps(value)[:80]}; it must be a string or a non-empty list of "
        '{"role": ..., "content": ...} messages'
    )


def _label(value: Any, line: int, key: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise DatasetError(f"line {line}: {key!r} is {json.dumps(value)[:80]}; it must be a string or a number")
    text = str(value).strip()
    if not text:
        raise DatasetError(f"line {line}: {key!r} is empty; every prompt needs its reference answer")
    return text


def load_items(path: Path, input_key: str = "prompt", label_key: str = "label") -> list[EvalItem]:
    """Read every non-blank line of ``path``."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise DatasetError(f"{path} cannot be read: {exc.strerror}") from None
    items: list[EvalItem] = []
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path} line {number} is not JSON: {exc.msg}") from None
        if not isinstance(row, dict):
            raise DatasetError(f"{path} line {number} is {type(row).__name__}, must be an object")
        for key in (input_key, label_key):
            if key not in row:
                keys = ", ".join(sorted(row)) or "none"
                raise DatasetError(
                    f"{path} line {number} has no {key!r} key (keys: {keys}); set --input-key/--label-key"
                )
        messages = _messages(row[input_key], number, input_key)
        items.append(EvalItem(len(items), messages, _label(row[label_key], number, label_key)))
    if not items:
        raise DatasetError(f"{path} holds no rows")
    return items
