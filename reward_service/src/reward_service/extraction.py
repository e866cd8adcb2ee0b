"""Explicit final-answer extraction and gold-label normalisation (pure functions, no I/O).

math_verify, given a whole response, falls back to any earlier expression when the final `\\boxed{}` is
empty or unparseable, and reads a stray `$15+27=42$` as an answer when there is none. This module decides
what the final answer *is* before math_verify sees it: the content of the last `\\boxed{...}` (or
`\\fbox{...}`), or the text of the last `Answer:` line (without the bold marks around it), or whichever of
the two comes last. A response whose final answer is missing, unclosed or empty has no answer (`None`), and
the service scores it 0.0; nothing earlier in the response can rescue it. Only the short answer text reaches
math_verify, which also removes the regex cost of scanning long chains of thought; two plain integers are
compared directly. A percent is one reading, the number before its sign (`without_percent`), in answers and labels.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal

from reward_service.settings import Extraction

BOX_MARKERS = ("\\boxed", "\\fbox")
_BRACES = re.compile(r"\\.|[{}]", re.DOTALL)
_LINE_PREFIX = " \t>*_#"
_BLANKS = " \t"
_EMPHASIS = ("**", "__")
_CANONICAL_INTEGER = re.compile(r"0|-?[1-9][0-9]{0,29}")
_MATH_DELIMITERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))


class LabelError(ValueError):
    """The gold label cannot be used as a math answer; the message says why and what to send."""


def _brace_content(text: str, open_index: int) -> str | None:
    """Content of the brace group opening at `open_index`, or None when it never closes."""
    depth = 0
    for match in _BRACES.finditer(text, open_index):
        brace = match.group()
        if brace == "{":
            depth += 1
        elif brace == "}":
            depth -= 1
            if depth == 0:
                return text[open_index + 1 : match.start()]
    return None


def last_boxed(response: str) -> tuple[int, str | None] | None:
    """(position, content) of the last box marker, content None when unclosed; None without any box."""
    position = max(response.rfind(marker) for marker in BOX_MARKERS)
    if position < 0:
        return None
    marker = next(m for m in BOX_MARKERS if response.startswith(m, position))
    rest = position + len(marker)
    stripped = len(response) - len(response[rest:].lstrip())
    if stripped < len(response) and response[stripped] == "{":
        return position, _brace_content(response, stripped)
    # "\boxed 5", and "\boxed5" as math_verify reads it: the argument is the next token. A letter glued on names
    # another macro ("\fboxsep"), as in TeX.
    if stripped > rest or (rest < len(response) and response[rest].isdigit()):
        token = response[stripped:].split(maxsplit=1)
        return position, (token[0].rstrip("$.") if token else None)
    return position, None


class Work:
    """Characters examined by a scan, summed over the linear steps it takes (str.rfind, str.lstrip, a
    slice: each touches a character at most once). Only tests read it: it proves, by counting rather
    than timing, that extraction is linear in the response whatever the response holds."""

    def __init__(self) -> None:
        self.chars = 0


def _skip(line: str, start: int, chars: str, work: Work) -> int:
    """Index of the first character at or after `start` that is not in `chars`."""
    rest = line[start:]
    work.chars += len(rest)
    return start + len(rest) - len(rest.lstrip(chars))


def _word_at(line: str, start: int, word: str) -> bool:
    """`word` (lower case ASCII) at `start`, case-insensitively, as re.IGNORECASE compares letters."""
    piece = line[start : start + len(word)]
    return len(piece) == len(word) and all(c.casefold() == w for c, w in zip(piece, word, strict=True))


def _answer_on_line(line: str, work: Work) -> str | None:
    """The text after `Answer:` when `line` is an answer line, else None. The grammar, written once:

        [ \t>*_#]* (final[ \t]+)? answer [ \t]* (**|__)? [ \t]* : [ \t]* (**|__)? <answer>

    (case-insensitive). Each part is consumed greedily and never given back: no part can end with a
    character the next one starts with, so there is nothing to backtrack into, and the scan is one pass.
    """
    i = _skip(line, 0, _LINE_PREFIX, work)
    if _word_at(line, i, "final"):
        after = _skip(line, i + 5, _BLANKS, work)
        if after == i + 5 or not _word_at(line, after, "answer"):
            return None
        i = after
    if not _word_at(line, i, "answer"):
        return None
    i = _skip(line, i + 6, _BLANKS, work)
    if line.startswith(_EMPHASIS, i):
        i = _skip(line, i + 2, _BLANKS, work)
    if not line.startswith(":", i):
        return None
    i = _skip(line, i + 1, _BLANKS, work)
    if line.startswith(_EMPHASIS, i):
        i += 2
    return line[i:]


def last_answer_line(response: str, work: Work | None = None) -> tuple[int, str] | None:
    """(position, text) of the last line of the form `Answer: ...` (Minerva/DAPO style).

    Lines are read from the end, each once, so the work is linear in the response (`Work` counts it).
    """
    work = work or Work()
    end = len(response)
    while end >= 0:
        start = response.rfind("\n", 0, end) + 1
        line = response[start:end]
        work.chars += 2 * len(line) + 1
        answer = _answer_on_line(line, work)
        if answer is not None:
            return start, answer
        end = start - 1
    return None


def _unwrap(answer: str) -> str:
    text = answer.strip().rstrip(".").strip()
    for opening, closing in _MATH_DELIMITERS:
        if len(text) >= len(opening) + len(closing) and text.startswith(opening) and text.endswith(closing):
            text = text[len(opening) : len(text) - len(closing)].strip()
            break
    boxed = last_boxed(text)
    if boxed is not None and boxed[0] == 0 and boxed[1] is not None:
        text = boxed[1].strip()
    return text


def _closing_emphasis_removed(answer: str) -> str:
    """`Answer: **42**`: the line's grammar takes the opening `**` (or `__`), this the closing one, with a full
    stop on either side of it; left in, `42**` is an answer math_verify does not read as 42."""
    text = answer.strip().rstrip(".").rstrip()
    for mark in _EMPHASIS:
        if text.endswith(mark):
            return text[: -len(mark)]
    return text


def extract_final_answer(response: str, mode: Extraction) -> str | None:
    """The final answer of `response` under `mode`, or None when it has none (missing, unclosed, empty)."""
    boxed = last_boxed(response) if mode is not Extraction.ANSWER_LINE else None
    line = last_answer_line(response) if mode is not Extraction.BOXED else None
    if boxed is not None and (line is None or boxed[0] > line[0]):
        content = boxed[1]
    elif line is not None:
        content = _closing_emphasis_removed(line[1])
    else:
        return None
    if content is None:
        return None
    answer = without_percent(_unwrap(content))
    return answer or None


# A trailing percent sign, as LaTeX and plain text write it, and the spacing LaTeX puts before it.
_PERCENT_SIGNS = ("\\text{\\%}", "\\mathrm{\\%}", "\\text{%}", "\\%", "%")
_THIN_SPACES = ("\\,", "\\;", "\\!", "\\ ", "~")


def without_percent(text: str) -> str:
    """`50\\%` as the number 50: a percent answer is graded as the number written before its sign, so it
    matches a gold `50` or `50\\%` and never `0.5` (math_verify alone reads `50\\%` as 1/2 and also accepts
    50: both golds scored 1.0). A text that is only the sign is kept as is."""
    stripped = text.rstrip()
    for sign in _PERCENT_SIGNS:
        if stripped.endswith(sign):
            number = stripped[: -len(sign)].rstrip()
            while number.endswith(_THIN_SPACES):
                number = number[: -2 if number[-2:] in _THIN_SPACES else -1].rstrip()
            return number or text
    return text


def label_text(label: str | int | float | None) -> str:
    """The gold label as answer text: integers and floats are accepted, null and empty are not."""
    if label is None:
        raise LabelError("label is null: the math_verify backend needs the gold answer; send it as a string or number")
    if isinstance(label, bool):
        raise LabelError(f"label {label!r} is a boolean: send the gold answer as a string or number")
    if isinstance(label, int):
        return str(label)
    if isinstance(label, float):
        if not math.isfinite(label):
            raise LabelError(f"label {label!r} is not a finite number: send the gold answer as a string")
        if label.is_integer():
            return str(int(label))
        return format(Decimal(repr(label)), "f")
    text = without_percent(label.strip())
    if not text:
        raise LabelError('label is empty: send the gold answer, e.g. "42" or "\\\\frac{1}{2}"')
    return text


def gold_latex(label: str) -> str:
    """The LaTeX math_verify parses for a gold label (a label that has its own \\boxed is kept as is)."""
    return label if "\\boxed" in label else "\\boxed{" + label + "}"


def answer_latex(answer: str) -> str:
    """The LaTeX math_verify parses for an extracted final answer."""
    return "\\boxed{" + answer + "}"


def is_plain_integer(text: str) -> bool:
    """A canonical integer of at most 30 digits: `0`, `42`, `-7`; not `007`, `-0`, `4.0` or `4,000`."""
    return _CANONICAL_INTEGER.fullmatch(text) is not None


def integer_verdict(label: str, answer: str) -> float | None:
    """The reward when gold and answer are both plain integers in canonical form, else None.

    Integer answers are the common case in math RL data (DAPO, AIME); comparing them as integers gives
    exactly math_verify's verdict (tested against it) at a tiny fraction of its parse cost.
    """
    if is_plain_integer(label) and is_plain_integer(answer):
        return 1.0 if int(label) == int(answer) else 0.0
    return None
