"""Final-answer extraction and label normalisation: pure tables."""

from __future__ import annotations

import pytest
from math_verify import parse, verify
from reward_service.extraction import LabelError, extract_final_answer, integer_verdict, label_text
from reward_service.settings import Extraction

COT = "We expand: $\\binom{6}{2} = 15$, so there are 15 pairs.\n"

BOTH = Extraction.BOXED_OR_ANSWER_LINE


@pytest.mark.parametrize(
    ("response", "mode", "answer"),
    [
        (COT + "The answer is $\\boxed{15}$.", BOTH, "15"),
        (COT + "so $\\boxed{\\frac{1}{2}}$", BOTH, "\\frac{1}{2}"),
        (COT + "nested $\\boxed{\\{1, 2\\}}$", BOTH, "\\{1, 2\\}"),
        (COT + "$\\boxed{41}$ no wait $\\boxed{42}$", BOTH, "42"),
        (COT + "\\fbox{7}", BOTH, "7"),
        (COT + "\\boxed 5 is it", BOTH, "5"),
        (COT + "so $\\boxed5$.", BOTH, "5"),  # TeX's one-token argument, as math_verify reads it
        (COT + "Answer: 12", BOTH, "12"),
        (COT + "**Answer:** $\\frac{3}{4}$.", BOTH, "\\frac{3}{4}"),
        (COT + "answer: \\boxed{9}", Extraction.ANSWER_LINE, "9"),
        (COT + "$\\boxed{3}$\nAnswer: 4", BOTH, "4"),
        (COT + "Answer: 4\nso $\\boxed{3}$", BOTH, "3"),
        (COT + "Answer: 4\nso $\\boxed{3}$", Extraction.ANSWER_LINE, "4"),
        (COT + "Answer: 4\nso $\\boxed{3}$", Extraction.BOXED, "3"),
    ],
)
def test_the_final_answer_is_the_last_box_or_answer_line(
    response: str,
    mode: Extraction,
    answer: str,
) -> None:
    assert extract_final_answer(response, mode) == answer


@pytest.mark.parametrize(
    "response",
    [
        COT + "Therefore the answer is $\\boxed{}$.",  # empty final box after a correct equation
        COT + "Therefore $\\boxed{   }$.",
        COT + "$\\boxed{15}$ and finally $\\boxed{}$",  # an earlier box does not rescue an empty last one
        COT + "Therefore $\\boxed{15",  # truncated: the final box never closes
        COT + "no final answer at all, although 15 appears above",
        COT + "Answer:   ",
        COT + "\\fboxsep=2pt",  # another macro, whose name starts with a box marker's
        COT + "so the answer is \\boxed",  # the marker is the response's last word
        "",
    ],
    ids=[
        "an empty last box",
        "a blank box",
        "an empty box after a full one",
        "a box that never closes",
        "no final answer",
        "an empty Answer:",
        "another macro starting like a box",
        "the marker as the last word",
        "an empty response",
    ],
)
def test_a_missing_or_empty_final_answer_is_none(response: str) -> None:
    assert extract_final_answer(response, BOTH) is None


def test_the_answer_line_mode_ignores_boxes() -> None:
    assert extract_final_answer(COT + "$\\boxed{15}$", Extraction.ANSWER_LINE) is None


def test_extraction_of_a_long_unclosed_run_is_linear_enough_to_finish() -> None:
    response = "\\( a " * 20_000 + "\\boxed{" + "{" * 50_000
    assert extract_final_answer(response, BOTH) is None


@pytest.mark.parametrize(
    ("label", "text"),
    [
        (42, "42"),
        (-3, "-3"),
        (3.0, "3"),
        (0.5, "0.5"),
        (1e-7, "0.0000001"),
        (" 15 ", "15"),
        ("\\frac{1}{2}", "\\frac{1}{2}"),
        (10**30, "1" + "0" * 30),
    ],
)
def test_numeric_and_string_labels_become_answer_text(label: object, text: str) -> None:
    assert label_text(label) == text  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("label", "says"), [(None, "null"), ("", "empty"), ("  ", "empty"), (True, "boolean"), (float("nan"), "finite")]
)
def test_unusable_labels_are_refused_with_a_reason(label: object, says: str) -> None:
    with pytest.raises(LabelError, match=says):
        label_text(label)  # type: ignore[arg-type]


INTEGER_PAIRS = [
    ("15", "15"),
    ("15", "16"),
    ("0", "0"),
    ("-7", "-7"),
    ("-7", "7"),
    ("100", "1000"),
    ("123456789012345678901234567890", "123456789012345678901234567890"),
    ("123456789012345678901234567890", "123456789012345678901234567891"),
    ("42", "-42"),
]


@pytest.mark.parametrize(("label", "answer"), INTEGER_PAIRS)
def test_the_integer_fast_path_gives_math_verifys_verdict(label: str, answer: str) -> None:
    expected = verify(
        parse("\\boxed{" + label + "}", parsing_timeout=None),
        parse("\\boxed{" + answer + "}", parsing_timeout=None),
        timeout_seconds=None,
    )
    assert integer_verdict(label, answer) == (1.0 if expected else 0.0)


@pytest.mark.parametrize(
    ("label", "answer"),
    [("15", "15.0"), ("15", "015"), ("1/2", "1"), ("15", "x"), ("-0", "0"), ("1" * 31, "1" * 31), ("15", "1,5")],
)
def test_anything_but_two_canonical_integers_goes_to_math_verify(label: str, answer: str) -> None:
    assert integer_verdict(label, answer) is None
