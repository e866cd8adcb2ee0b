"""extraArgs flags that take a credential (`--wandb-key`, SGLang's and the router's API keys and passwords) are
refused by the check the operator runs (`planning.validation.check`) with spec.secretEnv named as the fix, in
both spellings, and the refusal never quotes the value; flags whose dest only reads like one (a data field's key,
a tokenizer's special token) pass. Every dest of miles's table that reads like a credential is judged: refused,
or listed with what it is."""

from __future__ import annotations

import pytest
from grpo_operator.cli.loading import parse_run
from grpo_operator.planning.flags import (
    CREDENTIAL_SUFFIXES,
    NOT_CREDENTIALS,
    credential_values,
    is_credential,
    miles_flags,
)
from grpo_operator.planning.validation import check, errors

from tests.support.builders import example

VALUE = "wandb-canary-0123456789"
WANDB_FIX = (
    "takes a credential, and Megatron prints every argument into the driver's log, which the operator keeps (its "
    "tail, evidence bundles); remove it from extraArgs and set spec.secretEnv: [{name: WANDB_API_KEY, secretKeyRef: "
    "{name: <secret>, key: <key>}}] instead (WANDB_API_KEY is read from the environment)"
)
CREDENTIAL_FLAGS = sorted({name for name, flag in miles_flags().items() if is_credential(flag.dest)})


def _problems(args: list[str]) -> list[str]:
    run, problems = parse_run(example("quickstart", {"extraArgs": args}))
    assert run is not None, [str(p) for p in problems]
    return [str(p) for p in errors(check(run).problems)]


@pytest.mark.parametrize(
    "args", [["--wandb-key", VALUE], [f"--wandb-key={VALUE}"]], ids=["flag and value", "flag=value"]
)
def test_wandb_key_is_refused_in_either_spelling_with_secret_env_as_the_fix_and_its_value_unquoted(
    args: list[str],
) -> None:
    problems = _problems(["--use-wandb", *args])
    assert problems == [f"spec.extraArgs[1]: --wandb-key {WANDB_FIX}"]
    assert VALUE not in problems[0]


def test_the_credential_flags_of_the_miles_flag_table_are_the_keys_passwords_and_api_keys() -> None:
    assert CREDENTIAL_FLAGS == [
        "--router-api-key",
        "--router-control-plane-api-keys",
        "--router-oracle-password",
        "--sglang-admin-api-key",
        "--sglang-api-key",
        "--sglang-ssl-keyfile-password",
        "--wandb-key",
    ]


@pytest.mark.parametrize("flag", CREDENTIAL_FLAGS)
def test_every_credential_flag_is_refused_naming_secret_env_without_quoting_the_value(flag: str) -> None:
    for args in ([flag, VALUE], [f"{flag}={VALUE}"]):
        [problem] = _problems(args)
        assert problem.startswith(f"spec.extraArgs[0]: {flag} takes a credential"), problem
        assert "spec.secretEnv" in problem and VALUE not in problem


def test_every_dest_that_reads_like_a_credential_is_refused_or_listed_with_what_it_is() -> None:
    dests = {flag.dest for flag in miles_flags().values()}
    reads_like = {d for d in dests if d.endswith(CREDENTIAL_SUFFIXES)}
    assert set(NOT_CREDENTIALS) <= reads_like, "a listed dest is no longer in the table: drop it from NOT_CREDENTIALS"
    assert {d for d in reads_like if is_credential(d)} == reads_like - set(NOT_CREDENTIALS)


@pytest.mark.parametrize(
    "args",
    [["--eval-input-key", "question"], ["--metadata-key", "meta"], ["--fim-pad-token", "<pad>"], ["--tool-key", "t"]],
    ids=["--eval-input-key", "--metadata-key", "--fim-pad-token", "--tool-key"],
)
def test_a_flag_whose_dest_only_reads_like_a_credential_passes(args: list[str]) -> None:
    assert _problems(args) == []


def test_an_unknown_flag_named_like_a_credential_is_refused_without_quoting_its_value() -> None:
    [problem] = _problems([f"--wandb-api-key={VALUE}"])
    assert problem.startswith("spec.extraArgs[0]: --wandb-api-key is not a flag") and VALUE not in problem


@pytest.mark.parametrize(
    ("args", "values"),
    [
        (["--wandb-key", "k1", "--use-wandb"], ["k1"]),
        (["--wandb-key=k2"], ["k2"]),
        (["--router-control-plane-api-keys", "a1", "b2", "--lr", "1e-6"], ["a1", "b2"]),
        (["--wandb-api-key", "k3"], ["k3"]),  # not a flag of miles, but a credential all the same
        (["--eval-input-key", "question", "--wandb-key="], []),
        (["--lr", "1e-6"], []),
    ],
    ids=[
        "--wandb-key and its value",
        "--wandb-key=value",
        "two router api keys",
        "--wandb-api-key, not miles's",
        "an empty --wandb-key=",
        "no credential",
    ],
)
def test_the_values_extra_args_give_credential_flags_are_found_for_redaction(
    args: list[str], values: list[str]
) -> None:
    assert credential_values(args) == values
