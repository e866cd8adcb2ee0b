"""How every message quotes a user's value: control characters shown as their escapes, the value shown as
written up to `ECHO_CHARS` characters, `...` marking a cut, and a non-string value shown as its text."""

from __future__ import annotations

from grpo_operator.api.quote import ECHO_CHARS, echo, escape


def test_control_characters_are_shown_as_their_escapes_and_printable_text_as_written() -> None:
    assert escape("ckpt\x1b[2J\u202edir") == "ckpt\\x1b[2J\\u202edir"
    assert escape("plain text, it's fine") == "plain text, it's fine"


def test_a_value_up_to_the_limit_is_shown_whole_and_a_longer_one_cut_with_a_mark() -> None:
    assert echo("abc") == "abc"
    at_limit = "a" * ECHO_CHARS
    assert echo(at_limit) == at_limit
    assert echo(at_limit + "b") == at_limit + "..."


def test_a_short_value_whose_escapes_run_past_the_limit_is_cut_too() -> None:
    shown = echo("\x1b" * 20)  # 20 characters, 80 once escaped
    assert shown == ("\\x1b" * 15) + "..."


def test_an_apostrophe_is_shown_as_written_whatever_follows_the_cut() -> None:
    value = "it's " + "x" * (ECHO_CHARS - 4) + '"'  # the double quote lies past the shown part
    assert echo(value) == value[:ECHO_CHARS] + "..."


def test_a_number_is_shown_as_its_text() -> None:
    assert echo(12345) == "12345"
    assert echo(0.5) == "0.5"
