"""spec.extraArgs checked against miles's flag table at the pins: what miles would refuse or read as something
else, and what would override a value the operator renders or change what it reads, is refused with the reason
and the nearest real flag; what miles takes as written passes."""

from __future__ import annotations

import argparse
import contextlib
import io
from typing import Any

import pytest
from grpo_dev.miles_flags import FlagData, miles_parsers, parse_like_miles
from grpo_operator.cli.loading import parse_run
from grpo_operator.planning.flags import MANAGED_FLAGS, REFUSED_FLAGS, check_extra_args, managed_dests, miles_flags
from grpo_operator.planning.miles_parser import joined_negative_values
from grpo_operator.planning.validation import errors, validate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.builders import EXAMPLES, PYTHON_ONLY_INVALID_EXAMPLES, example, rendered


def _problems(args: list[str]) -> list[str]:
    parsed, problems = parse_run(example("quickstart", {"extraArgs": args}))
    assert parsed is not None, problems
    return [str(p) for p in errors(validate(parsed))]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--sglang-ep-size", "2"],
            "an alias of --sglang-expert-parallel-size, the same setting); set "
            "spec.topology.rollout.expertParallel instead",
        ),
        (["--sglang-ep=2"], "an alias of --sglang-expert-parallel-size"),
        (
            ["--persistent-save-interval", "5"],
            "an alias of --save-interval, the same setting); set spec.storage.saveInterval",
        ),
        (["--prometheus-run-name", "x"], "is fixed by the operator (status.metrics"),
        (["--save-trigger-sentinel", "/fsx/x"], "is fixed by the operator (suspend saves through this file"),
        (["--recompute-granularity", "selective"], "the memory plan assumes full recompute"),
        (["--optimizer", "sgd"], "the memory plan sizes adam's state"),
        (["--sglang-moe-runner-backend", "flashinfer"], "flashinfer MoE runner"),
        (["--lr-dec", "cosine"], "is an abbreviation: Megatron's parser (allow_abbrev=False"),
        (["--help"], "exits 0 before training"),
        (["-h"], "exits 0 before training"),
        ([""], "is an empty argument"),
        (["--lr-warmup-iters"], "needs 1 value(s) after it, got 0"),
        (["--lr-warmup-itres", "5"], "the nearest flag is --lr-warmup-iters"),
        (["--log-passrate", "yes"], "yes is not a flag"),
        (["--log-passrate=1"], "takes no value"),
        (["--kitchen-recipe-number", "1"], "exists only when megatron.core.extensions.kitchen imports"),
        (["--megatron-to-hf-mode", "bridge"], "a resumed run would train from rollout 0 again"),
        (["--wandb-always-use-train-step"], "turns the rollout/step gauge"),
        (["--start-rollout-id", "0"], "instead of the checkpoint's next one"),
    ],
    ids=[
        "--sglang-ep-size alias",
        "--sglang-ep=2 alias",
        "--persistent-save-interval alias",
        "--prometheus-run-name fixed",
        "--save-trigger-sentinel fixed",
        "selective recompute",
        "sgd optimizer",
        "flashinfer MoE runner",
        "--lr-dec abbreviation",
        "--help",
        "-h",
        "an empty argument",
        "a flag without its value",
        "a misspelt flag",
        "a value to a flag that takes none",
        "=value to a flag that takes none",
        "a kitchen flag",
        "bridge checkpoint mode",
        "--wandb-always-use-train-step",
        "--start-rollout-id",
    ],
)
def test_extra_args_miles_would_misread_or_that_override_the_operator_are_refused_with_the_reason(
    args: list[str], expected: str
) -> None:
    problems = _problems(args)
    assert len(problems) == 1 and problems[0].startswith("spec.extraArgs[") and expected in problems[0], problems


def test_flags_miles_takes_as_written_pass() -> None:
    args = ["--log-passrate", "--lr-warmup-iters", "-5", "--worker-urls", "--trainer-heartbeat-checker-interval=30"]
    assert _problems(args) == []


def test_every_flag_the_renderer_emits_is_managed_under_every_alias() -> None:
    emitted: set[str] = set()
    for path in sorted(set(EXAMPLES.glob("*.yaml")) - {EXAMPLES / n for n in PYTHON_ONLY_INVALID_EXAMPLES}):
        for reward in (
            {},
            {"reward": {"type": "dapo", "remote": None}},
            {"reward": {"type": "remote", "remote": {"replicas": 1}}},
        ):
            argv = rendered(example(path.stem, reward)).job.miles_argv
            emitted |= {a.split("=", 1)[0] for a in argv if a.startswith("--")}
    assert sorted(emitted - set(MANAGED_FLAGS)) == []
    flags = miles_flags()
    for flag in emitted:
        for alias in flags[flag].names:
            assert check_extra_args([alias] + ["1"] * flags[alias].min_values), alias


# ---------------------------------------------------------------- fuzz: whatever passes, miles's two parsers
# take as written (CPython's argparse built from the flag data as miles builds them) and it sets no managed dest


def _argparse_of_the_table() -> argparse.ArgumentParser:
    """Megatron's parser built from the table (no abbreviations, megatron/training/arguments.py:88-90), every
    dest left unset unless given, to see which dests an argv sets."""
    parser = argparse.ArgumentParser(
        prog="train.py", argument_default=argparse.SUPPRESS, allow_abbrev=False, exit_on_error=False
    )
    seen: set[int] = set()
    for flag in miles_flags().values():
        if id(flag) in seen or any(n in ("-h", "--help") for n in flag.names):
            continue
        seen.add(id(flag))
        low, high = flag.min_values, flag.max_values
        kwargs: dict[str, Any] = {"dest": flag.dest}
        if high == 0:
            kwargs["action"] = "store_true"
        elif (low, high) != (1, 1):
            kwargs["nargs"] = {(0, 1): "?", (0, None): "*", (1, None): "+"}.get((low, high), low)
        with contextlib.suppress(argparse.ArgumentError):
            parser.add_argument(*flag.names, **kwargs)
    return parser


PARSER = _argparse_of_the_table()
MILES_PARSERS = miles_parsers(FlagData.load())
QUICKSTART_ARGV = list(rendered(example("quickstart")).job.miles_argv)
NAMES = sorted(miles_flags())
token = st.one_of(
    st.sampled_from(NAMES),
    st.sampled_from(NAMES).map(lambda n: n[: max(3, len(n) // 2)]),
    st.sampled_from(NAMES).map(lambda n: n + "=1"),
    st.sampled_from(sorted(MANAGED_FLAGS) + sorted(REFUSED_FLAGS)),
    st.sampled_from(["", " ", "-h", "--help", "-x", "1", "-1", "0.5", "-1e-8", "abc", "x", "--", "-", "--=1"]),
    st.text(min_size=0, max_size=8),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(token, max_size=6))
def test_fuzz_extra_args_that_pass_are_parsed_by_miles_as_written_and_set_no_managed_value(args: list[str]) -> None:
    problems = check_extra_args(args)
    assert all(0 <= i < len(args) and why for i, why in problems)
    if problems:
        return
    refused = parse_like_miles(QUICKSTART_ARGV + joined_negative_values(args), MILES_PARSERS)
    assert refused is None, f"accepted {args!r}, which miles's parsers refuse: {refused}"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        namespace = PARSER.parse_args(joined_negative_values(args))
    assert not set(vars(namespace)) & set(managed_dests()), args


def test_an_extra_arg_is_quoted_escaped_and_cut_in_its_message() -> None:
    hostile = "--" + "\u202e" + "x" * 2000
    [(index, why)] = check_extra_args([hostile])
    assert index == 0
    assert "\u202e" not in why and "\\u202e" in why
    assert "x" * 100 not in why and "..." in why
