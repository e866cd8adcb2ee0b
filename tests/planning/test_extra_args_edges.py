"""spec.extraArgs at the edges of the check: a stray value is named as no flag with the rule (miles takes --long
flags), and each flag's value count is held where miles's table says it ends. The flags of several values
(--rampup-batch-size takes 3, --multi-lora-adapter 2) are the ones where a count off by one shows: the problem
names the flag's own index, which `grpo validate` prints as spec.extraArgs[i]."""

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


def test_each_value_after_an_unknown_flag_is_skipped_and_the_next_flag_still_checked() -> None:
    found = check_extra_args(["--not-a-miles-flag", "1", "--help"])
    assert [index for index, _ in found] == [0, 2], found
    assert "exits 0 before training" in found[1][1]


def test_a_flag_of_three_values_given_two_is_named_at_the_flag() -> None:
    found = check_extra_args(["--lr-warmup-iters", "5", "--rampup-batch-size", "8", "16"])
    assert found == [(2, "--rampup-batch-size needs 3 value(s) after it, got 2; add the value")]


def test_a_flag_of_three_values_given_three_passes_and_a_fourth_is_no_flag() -> None:
    assert check_extra_args(["--rampup-batch-size", "8", "16", "1000"]) == []
    [(index, why)] = check_extra_args(["--rampup-batch-size", "8", "16", "1000", "7"])
    assert index == 4 and why.startswith("7 is not a flag"), why


def test_a_value_written_with_equals_to_a_flag_of_several_values_is_refused_at_the_flag() -> None:
    # argparse: "argument --rampup-batch-size: expected 3 arguments", whatever follows.
    [(index, why)] = check_extra_args(["--lr-warmup-iters", "5", "--rampup-batch-size=8"])
    assert index == 2
    assert why == (
        "--rampup-batch-size=8: --rampup-batch-size takes 3 values, which miles reads only as the arguments after "
        "it; write --rampup-batch-size followed by the values, without '='"
    )


def test_a_value_written_with_equals_to_a_flag_of_two_values_is_refused_too() -> None:
    [(index, why)] = check_extra_args(["--multi-lora-adapter=/fsx/lora"])
    assert index == 0 and "--multi-lora-adapter takes 2 values" in why, why
