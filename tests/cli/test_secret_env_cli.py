"""`grpo validate` and `grpo render` as a user runs them on a run with a tracker key: `--wandb-key` in extraArgs
is one line naming spec.secretEnv as the fix and never the key, exit 1; the same run with spec.secretEnv is valid
and renders the variable by secretKeyRef."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.support.builders import example
from tests.support.cli import grpo

KEY_VALUE = "wandb-canary-5f0c2a9e"


def _text(patch: dict[str, Any]) -> str:
    return yaml.safe_dump(example("quickstart", patch))


@pytest.mark.parametrize(
    "args", [["--wandb-key", KEY_VALUE], [f"--wandb-key={KEY_VALUE}"]], ids=["flag and value", "flag=value"]
)
def test_validate_refuses_a_wandb_key_in_extra_args_naming_secret_env_and_not_the_key(args: list[str]) -> None:
    result = grpo("validate", "-f", "-", stdin=_text({"extraArgs": ["--use-wandb", *args]}))
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "spec.extraArgs[1]: --wandb-key takes a credential, and Megatron prints every argument into the driver's "
        "log, which the operator keeps (its tail, evidence bundles); remove it from extraArgs and set "
        "spec.secretEnv: [{name: WANDB_API_KEY, secretKeyRef: {name: <secret>, key: <key>}}] instead "
        "(WANDB_API_KEY is read from the environment)"
    ]
    assert KEY_VALUE not in result.stdout + result.stderr and "Traceback" not in result.stderr


def test_the_same_run_with_secret_env_validates_and_renders_the_key_by_reference() -> None:
    patch = {
        "extraArgs": ["--use-wandb"],
        "secretEnv": [{"name": "WANDB_API_KEY", "secretKeyRef": {"name": "wandb", "key": "api-key"}}],
    }
    assert grpo("validate", "-f", "-", stdin=_text(patch)).returncode == 0
    rendered = grpo("render", "-f", "-", stdin=_text(patch))
    assert rendered.returncode == 0, rendered.stdout
    cluster = next(d for d in yaml.safe_load_all(rendered.stdout) if d and d["kind"] == "RayCluster")
    head = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}}} in head


def test_validate_refuses_a_secret_env_name_the_operator_sets() -> None:
    patch = {"secretEnv": [{"name": "RAY_AUTH_TOKEN", "secretKeyRef": {"name": "mine", "key": "token"}}]}
    result = grpo("validate", "-f", "-", stdin=_text(patch))
    assert result.returncode == 1
    assert result.stdout.startswith("spec.secretEnv[0].name: RAY_AUTH_TOKEN is set by the operator in every Ray pod")
