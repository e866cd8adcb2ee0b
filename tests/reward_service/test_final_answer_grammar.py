"""Which line of a response counts as its `Answer:` line, and what a final box at the very end gives: the answer a
user's sample is scored on (each case is a response a model writes; the reward follows from the answer).

The grammar (extraction.py): `[ \\t>*_#]* (final[ \\t]+)? answer [ \\t]* (**|__)? [ \\t]* : [ \\t]* (**|__)? <answer>`,
case-insensitive, the last such line winning unless a box comes after it."""

from __future__ import annotations

import pytest
from reward_service.extraction import Work, extract_final_answer, last_answer_line
from reward_service.settings import Extraction

from reward_service import worker

LINE = Extraction.ANSWER_LINE
BOTH = Extraction.BOXED_OR_ANSWER_LINE


@pytest.mark.parametrize(
    ("response", "answer"),
    [
        ("Final Answer: 7", "7"),
        ("FINAL ANSWER: 7", "7"),
        ("final \t answer : 7", "7"),
        ("> **Final Answer:** 7", " 7"),
        ("# Answer: 7", "7"),
        ("Answer **: 7", "7"),  # emphasis closed before the colon
        ("Answer** : 7", "7"),
        ("Answer __ :7", "7"),
        ("Answer:__ 7", " 7"),  # the blanks after the emphasis are the answer's: stripped later
        ("finalanswer: 7", None),  # "final" must be a word of its own
        ("final: 7", None),  # "final" alone is not "final answer"
        ("Final result: 7", None),
        ("Finals answer: 7", None),
        ("Final answers: 7", None),
        ("Answer*: 7", None),  # one star is not emphasis
        ("Answer _: 7", None),
        ("The answer: 7", None),  # not at the start of the line
    ],
)
def test_which_lines_are_answer_lines(response: str, answer: str | None) -> None:
    found = last_answer_line(response)
    assert (found[1] if found else None) == answer
    assert extract_final_answer(response, LINE) == (answer.strip() if answer else None)


def test_an_answer_line_after_a_blank_first_line_is_found() -> None:
    assert extract_final_answer("\nAnswer: 12", LINE) == "12"
    assert extract_final_answer("\n\nAnswer: 12\n", LINE) == "12"


@pytest.mark.parametrize(
    "response",
    [
        "We get 15 pairs, so the answer is \\boxed",  # cut off at the length limit right after the marker
        "We get 15 pairs, so the answer is \\fbox",
        "Answer: 15\nso the answer is $\\boxed$",  # an empty final box: the earlier line does not rescue it
        "Answer: 15\nso the answer is $\\boxed$.",
    ],
)
def test_a_final_box_marker_without_an_argument_leaves_no_answer(response: str) -> None:
    assert extract_final_answer(response, BOTH) is None
    assert worker.quick_verdict("15", response, BOTH, max_chars=1000) == worker.ItemResult(worker.NO_ANSWER, 0.0)


@pytest.mark.parametrize(
    ("response", "answer"),
    [
        ("Answer: **42**", "42"),
        ("Answer: __42__", "42"),
        ("Final answer: **42**.", "42"),
        ("Answer: **42.**", "42"),
        ("Answer: **$\\frac{1}{2}$**", "\\frac{1}{2}"),
        ("Answer: 42", "42"),
    ],
)
def test_a_bold_answer_on_an_answer_line_is_the_answer_without_its_markup(response: str, answer: str) -> None:
    assert extract_final_answer(response, BOTH) == answer


def test_a_bold_integer_answer_gets_its_reward() -> None:
    # Before: "Answer: **42**" gave the answer "42**", which math_verify does not read as 42: reward 0.0.
    assert worker.quick_verdict("42", "So the answer is\nAnswer: **42**", BOTH, max_chars=1000) == worker.ItemResult(
        worker.SCORED, 1.0
    )


@pytest.mark.parametrize(
    "text",
    ["\n" * 500, "Answer" + " " * 500 + "x", "answer " * 70, "> *_#" * 100],
    ids=["newlines", "a long gap after Answer", "answer repeated", "markdown marks"],
)
def test_the_work_counter_sees_every_character_the_scan_reads(text: str) -> None:
    # The linearity bound in test_reward_linear.py proves nothing if the counter undercounts.
    work = Work()
    last_answer_line(text, work)
    assert work.chars >= len(text)


@pytest.mark.parametrize("answer", ["$$", "$ $", "\\(\\)", "\\[ \\]", "$$ $$"])
def test_empty_math_on_the_answer_line_is_no_answer(answer: str) -> None:
    assert extract_final_answer(f"So we are done.\nAnswer: {answer}", BOTH) is None
