"""The run's Ray auth token Secret and the checkpoint request made before a suspend: what the head, the workers
and the operator rely on from each."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from grpo_operator.planning.plan import make_plan
from grpo_operator.render import names
from grpo_operator.render.auth import ray_auth_secret
from grpo_operator.render.job import SAVE_SENTINEL, checkpoint_request

from tests.support.builders import SETTINGS, example, run_of


def test_the_token_secret_holds_the_token_cannot_be_rotated_in_place_and_goes_with_the_run() -> None:
    secret = ray_auth_secret("team-a", "r", "uid-1", "s3cret")
    assert secret["stringData"] == {names.AUTH_TOKEN_KEY: "s3cret"}
    # A token changed under a running cluster would lock the operator out of the Ray Jobs API.
    assert secret["immutable"] is True
    (owner,) = secret["metadata"]["ownerReferences"]
    assert (owner["name"], owner["uid"], secret["metadata"]["name"]) == ("r", "uid-1", names.ray_auth_secret("r"))
    assert "ownerReferences" not in ray_auth_secret("team-a", "r", None, "s3cret")["metadata"]


def test_the_checkpoint_request_creates_the_save_sentinel_in_the_runs_checkpoint_dir(tmp_path: Path) -> None:
    run = run_of(example("quickstart"))
    plan = make_plan(run)
    request = checkpoint_request(run, plan, SETTINGS, "grpo-r-0123-g1")
    assert request.submission_id == "grpo-r-0123-g1-save"
    assert request.metadata["grpo.dev/purpose"] == "checkpoint-before-suspend"
    *command, sentinel = request.entrypoint_argv
    assert sentinel == f"{plan.checkpoint_dir}/{SAVE_SENTINEL}"
    # Run the job's command as the worker would, pointed at a scratch directory that does not exist yet.
    target = tmp_path / "ckpt" / SAVE_SENTINEL
    subprocess.run([sys.executable, *command[1:], str(target)], check=True)
    assert target.exists()
