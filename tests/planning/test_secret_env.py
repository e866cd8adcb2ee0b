"""spec.secretEnv names: a variable the render sets itself (the Ray token pair, the HF token of hfTokenSecret, the
pods' fixed env, the job's runtime env, the runtime's env, the fabric's env) or one named twice is refused by the
check the operator runs, naming the entry, the variable, who sets it and the fix; a name that is no environment
variable is refused when the run is read. Other names pass, and a runtime's defaults.secretEnv is checked as the
run's own."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from grpo_operator.api.runtime import GRPORuntime
from grpo_operator.cli.loading import parse_run
from grpo_operator.planning import documents
from grpo_operator.planning.validation import check, errors

from tests.support.builders import EXAMPLES, example, merge
from tests.support.runtimes import short_run


def _entry(name: str, secret: str = "tracker", key: str = "api-key") -> dict[str, Any]:
    return {"name": name, "secretKeyRef": {"name": secret, "key": key}}


def _problems(patch: dict[str, Any]) -> list[str]:
    run, problems = parse_run(example("quickstart", patch))
    assert run is not None, [str(p) for p in problems]
    return [str(p) for p in errors(check(run).problems)]


AUTH = "the operator in every Ray pod for Ray's token auth (from the run's own Secret)"
JOB = "the operator in the Ray job's runtime env (the driver's env takes it over the pod's)"


@pytest.mark.parametrize(
    ("name", "who"),
    [
        ("RAY_AUTH_TOKEN", AUTH),
        ("RAY_AUTH_MODE", AUTH),
        ("MILES_HOST_IP", "the operator in every Ray pod"),
        ("NCCL_SOCKET_IFNAME", "the operator in every Ray pod"),
        ("GRPO_RUN", JOB),
        ("PROMETHEUS_PORT", JOB),
        ("FI_PROVIDER", "the fabric env of instance type p5en.48xlarge"),
    ],
)
def test_a_variable_the_render_sets_is_refused_naming_who_sets_it_and_the_fix(name: str, who: str) -> None:
    assert _problems({"secretEnv": [_entry("WANDB_API_KEY"), _entry(name)]}) == [
        f"spec.secretEnv[1].name: {name} is set by {who}: the pod would get the variable twice and lose one value "
        "silently; rename the entry, the secret needs a variable of its own"
    ]


def test_hf_token_is_refused_only_beside_hf_token_secret_which_gives_it_already() -> None:
    assert _problems({"secretEnv": [_entry("HF_TOKEN")], "hfTokenSecret": None}) == []
    problems = _problems({"secretEnv": [_entry("HF_TOKEN")], "hfTokenSecret": {"name": "hf"}})
    assert problems == [
        "spec.secretEnv[0].name: HF_TOKEN is set by spec.hfTokenSecret: the pod would get the variable twice and "
        "lose one value silently; remove the entry, since spec.hfTokenSecret gives HF_TOKEN already, or drop "
        "spec.hfTokenSecret"
    ]


def test_a_variable_named_twice_is_refused_at_its_second_entry() -> None:
    problems = _problems({"secretEnv": [_entry("WANDB_API_KEY"), _entry("OTHER"), _entry("WANDB_API_KEY", "b")]})
    assert problems == [
        "spec.secretEnv[2].name: WANDB_API_KEY is named twice (first at spec.secretEnv[0]): a variable has one value; "
        "keep one entry"
    ]


def test_tracker_keys_and_lower_case_names_pass() -> None:
    entries = [_entry("WANDB_API_KEY"), _entry("MLFLOW_TRACKING_TOKEN"), _entry("ray_auth_token"), _entry("a.b-c")]
    assert _problems({"secretEnv": entries}) == []


@pytest.mark.parametrize("name", ["1WANDB", "WANDB API KEY", "WANDB=KEY", ""])
def test_a_name_that_is_no_environment_variable_is_refused_when_the_run_is_read(name: str) -> None:
    run, problems = parse_run(example("quickstart", {"secretEnv": [_entry(name)]}))
    assert run is None
    [problem] = [str(p) for p in problems]
    assert problem.startswith("spec.secretEnv[0].name: ")
    assert "environment variable name" in problem or "at least 1 character" in problem


@pytest.mark.parametrize(
    ("ref", "fragment"),
    [
        ({"name": "Tracker", "key": "k"}, "DNS subdomain"),
        ({"name": "t"}, "required"),
        ({"name": "t", "key": ".."}, "Secret key"),
    ],
    ids=["a name that is no DNS subdomain", "no key", "a key of .."],
)
def test_the_secret_key_ref_names_a_secret_and_a_key_both(ref: dict[str, str], fragment: str) -> None:
    run, problems = parse_run(example("quickstart", {"secretEnv": [{"name": "X", "secretKeyRef": ref}]}))
    assert run is None and fragment in " ".join(str(p) for p in problems), problems


RUNTIMES = EXAMPLES / "runtimes"


def _runtime(patch: dict[str, Any]) -> Any:
    doc = merge(yaml.safe_load((RUNTIMES / "h100-infiniband.yaml").read_text()), {"spec": {"defaults": patch}})
    runtime, problems = documents.parse_runtime(doc)
    assert runtime is not None, problems
    return runtime


def test_the_runtimes_secret_env_is_checked_against_its_own_env_and_named_in_the_problem() -> None:
    patch = {"env": {"PLATFORM_KEY": "x"}, "secretEnv": [_entry("PLATFORM_KEY")]}
    doc = merge(yaml.safe_load((RUNTIMES / "h100-infiniband.yaml").read_text()), {"spec": {"defaults": patch}})
    # Refused where the runtime is read; a copy recorded before that rule (status.runtime) is checked per run too.
    assert [str(p) for p in documents.parse_runtime(doc)[1]] == [
        "spec.defaults.secretEnv[0].name: PLATFORM_KEY is also in spec.defaults.env: the pods would get the variable "
        "twice; keep one of the two"
    ]
    runtime = GRPORuntime.model_validate_json(json.dumps(doc))
    run, problems = documents.parse_run(short_run(), runtime)
    assert run is not None, problems
    assert [str(p) for p in errors(check(run).problems)] == [
        "spec.secretEnv[0].name: PLATFORM_KEY (spec.secretEnv or GRPORuntime h100-ib's defaults.secretEnv) is set by "
        "GRPORuntime h100-ib's defaults.env: the pod would get the variable twice and lose one value silently; rename "
        "the entry, the secret needs a variable of its own"
    ]


def test_the_fabric_env_of_the_runtimes_type_is_the_renders_too() -> None:
    run, problems = documents.parse_run(short_run({"secretEnv": [_entry("NCCL_IB_HCA")]}), _runtime({}))
    assert run is not None, problems
    [problem] = [str(p) for p in errors(check(run).problems)]
    assert "NCCL_IB_HCA is set by the fabric env of instance type h100-ib" in problem


def test_a_run_keeps_its_own_entry_over_the_runtimes_of_the_same_name() -> None:
    runtime = _runtime({"secretEnv": [_entry("WANDB_API_KEY", "platform"), _entry("SHARED", "platform")]})
    run, problems = documents.parse_run(short_run({"secretEnv": [_entry("WANDB_API_KEY", "mine")]}), runtime)
    assert run is not None, problems
    assert [(e.name, e.secret_key_ref.name) for e in run.spec.secret_env] == [
        ("WANDB_API_KEY", "mine"),
        ("SHARED", "platform"),
    ]
    assert errors(check(run).problems) == []
