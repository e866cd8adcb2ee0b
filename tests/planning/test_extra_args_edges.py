"""spec.extraArgs at the edges of the check: a stray value is named as no flag with the rule (miles takes --long
flags), and each flag's value count is held where miles's table says it ends."""

from __future__ import annotations

from grpo_operator.planning.flags import check_extra_args


def test_a_value_without_its_flag_is_named_as_no_flag_with_the_rule() -> None:
    [(index, why)] = check_extra_args(["--lr-warmup-iters", "5", "yes"])
    assert index == 2
    assert why.startswith("yes is not a flag (miles takes --long flags; a value must follow its flag)"), why


def test_the_argument_after_an_empty_one_is_still_checked() -> None:
    found = check_extra_args(["", "--help"])
    assert [index for index, _ in found] == [0, 1], found
    assert "is an empty argument" in found[0][1] and "exits 0 before training" in found[1][1]
