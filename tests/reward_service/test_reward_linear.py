"""Extraction does work linear in the response, whatever the response holds (counted, not timed).

The adversarial shapes are the ones a backtracking `Answer:` pattern is quadratic on: long runs of the
blanks and markers that sit between the grammar's parts. `Work` counts the characters the scan examines;
a linear scan stays under a constant times the length at every size, a quadratic one cannot.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reward_service.extraction import Work, extract_final_answer, last_answer_line
from reward_service.settings import Extraction

from tests.support.fuzzing import examples

# The pattern extraction used before (a65bd72 extraction.py:22-25): the reference for what an answer line
# is, run here only on short strings.
REFERENCE = re.compile(
    r"^[ \t>*_#]*(?:final[ \t]+)?answer[ \t]*(?:\*\*|__)?[ \t]*:[ \t]*(?:\*\*|__)?(?P<answer>[^\n]*)$",
    re.IGNORECASE | re.MULTILINE,
)
FACTOR = 8


def reference(text: str) -> tuple[int, str] | None:
    found = None
    for found in REFERENCE.finditer(text):  # noqa: B007
        pass
    return None if found is None else (found.start(), found.group("answer"))


SHAPES = {
    "blanks after answer": lambda n: "Answer" + " " * n + "x",
    "tabs and spaces after answer": lambda n: "answer" + " \t" * (n // 2) + "**" + " " * (n // 2),
    "blanks after final": lambda n: "final" + " " * n + "answr: 1",
    "a long line prefix": lambda n: "> *_#" * (n // 5) + "answe",
    "blank lines": lambda n: "\n" * n,
    "answer words without a colon": lambda n: "answer " * (n // 7),
    "emphasis runs": lambda n: "answer" + "**" * (n // 2),
    "many answer lines": lambda n: "Answer: 1\n" * (n // 10),
    "one huge line": lambda n: "Final answer: " + "9" * n,
}


@pytest.mark.parametrize("shape", SHAPES)
def test_the_answer_line_scan_is_linear_on_adversarial_shapes(shape: str) -> None:
    for n in (1_000, 4_000, 16_000, 64_000):
        text = SHAPES[shape](n)
        work = Work()
        last_answer_line(text, work)
        assert work.chars <= FACTOR * len(text) + 16, (n, work.chars, len(text))


GRAMMAR = st.text(alphabet=" \t\n>*_#:AaNnSsWwEeRrFfIiLl9ſ", max_size=60)


@settings(max_examples=examples(300), deadline=None)
@given(GRAMMAR)
def test_the_scan_finds_exactly_the_answer_line_the_old_pattern_found(text: str) -> None:
    assert last_answer_line(text) == reference(text)


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.sampled_from(["answer", "final", " ", "\t", "**", "__", ":", "\n", "> ", "x"]), max_size=400))
def test_the_scan_stays_linear_on_any_mix_of_grammar_pieces(pieces: list[str]) -> None:
    text = "".join(pieces)
    work = Work()
    assert last_answer_line(text, work) == reference(text) or len(text) > 2000
    assert work.chars <= FACTOR * len(text) + 16


def test_a_16k_hostile_response_still_gets_its_final_answer() -> None:
    text = "answer" + " " * 16_000 + "x\nAnswer: 42"
    assert extract_final_answer(text, Extraction.BOXED_OR_ANSWER_LINE) == "42"
