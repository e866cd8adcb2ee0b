"""How a message quotes a user's value: escaped so the terminal shows what was written, and cut.

A value can carry control characters (ESC sequences repaint the terminal), C1 controls, or bidirectional
overrides and zero-width characters that make a printed line read differently from its bytes; and a
1024-character argument would bury the rule. Python's `repr` escapes every character that is not printable
(`str.isprintable`: C0, DEL, C1, format characters such as U+202E, separators), so each shows as
`\\xNN` / `\\uNNNN`.
"""

from __future__ import annotations

ECHO_CHARS = 60


def escape(text: str) -> str:
    """`text` with every non-printable character written as its escape, nothing cut; printable text is left
    as is, so escaping a message twice changes nothing."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def echo(value: object, limit: int = ECHO_CHARS) -> str:
    """A value as a message may quote it: repr-escaped and cut to `limit` characters, `...` marking a cut."""
    text = value if isinstance(value, str) else str(value)
    shown = repr(text[: limit + 1])[1:-1]
    return shown[:limit] + "..." if len(text) > limit or len(shown) > limit else shown
