"""What a run produced, end to end through the real API server and a real Ray head on the simulated cluster: the
miles double evaluates as miles does (`eval <id>: {...}` lines and `eval/*` gauges), and status.evaluation, the
EVAL column and `grpo results` say exactly what it logged; a double whose eval score falls while its training
reward rises is stopped with EvalRegressed and its evidence; a run that asked for a Hugging Face export ends with
its path in status.outputs, or Failed/ExportMissing when miles (the double) did not write it."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import grpo
from tests.support.operator_harness import (
    fake,
    jobs_client,
    jobs_of,
    manifest,
    phase_is,
    running_operator,
    wait_for,
)

pytestmark = pytest.mark.integration

EVAL_LINE = re.compile(r"\beval (\d+): (\{.*\})\s*$")


@pytest.fixture
def env(simulated_cluster, ray_head, sim_namespace, tmp_path: Path):  # type: ignore[no-untyped-def]
    with running_operator(simulated_cluster, sim_namespace, ray_head.dashboard_url, tmp_path) as op:
        yield op, sim_namespace, simulated_cluster, ray_head.dashboard_url


def _logged_evals(ray_url: str, ns: str, run: str) -> list[tuple[int, dict[str, float]]]:
    """The double's `eval <id>: {...}` lines, as miles writes them."""
    [job] = jobs_of(ray_url, ns, run)
    found = []
    for line in jobs_client(ray_url).get_job_logs(job.submission_id).splitlines():
        match = EVAL_LINE.search(line)
        if match:
            found.append((int(match.group(1)), ast.literal_eval(match.group(2))))
    return found


def _spec(tmp_path: Path, *knobs: str, rollouts: int, **extra: Any) -> dict[str, Any]:
    return fake(
        "--fake-checkpoints",
        "--fake-data-state-seconds",
        "0",
        *knobs,
        rollouts=rollouts,
        eval={"name": "aime", "promptData": f"{tmp_path}/shared/data/aime.jsonl", "interval": 2},
        storage={"mountPath": str(tmp_path / "shared"), "saveInterval": 4},
        **extra,
    )


def test_status_evaluation_the_eval_column_and_grpo_results_say_what_miles_logged(env, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _op, ns, cluster, ray_url = env
    kubectl = cluster.kubectl
    scores = "0.25,0.3125,0.375,0.5,0.4375,0.5625,0.5,0.625,0.5625"
    spec = _spec(tmp_path, "--fake-eval-score", scores, "--fake-eval-truncated", "0.125", rollouts=16)
    kubectl("apply", "-f", "-", input=manifest("scored", ns, {**spec, "export": {"huggingface": True}}))
    running = wait_for(
        "an evaluation while Running",
        lambda: (
            (r := phase_is(kubectl, ns, "scored", "Running"))
            and r["status"].get("evaluation")
            and r["status"].get("metrics")
            and r
        ),
    )
    table = kubectl("get", "grporuns", "-n", ns).stdout.splitlines()
    assert table[0].split()[:7] == ["NAME", "PHASE", "MODEL", "PROGRESS", "REWARD", "REPETITION", "EVAL"]
    shown = table[1].split()[6]
    assert float(shown) in {float(s) for s in scores.split(",")}, table
    assert running["status"]["evaluation"][0]["name"] == "aime"
    done = wait_for("Succeeded", lambda: phase_is(kubectl, ns, "scored", "Succeeded", "Failed"), timeout=180)
    status = done["status"]
    assert (status["phase"], status["reason"]) == ("Succeeded", "Succeeded"), status
    logged = _logged_evals(ray_url, ns, "scored")
    assert [r for r, _ in logged] == [0, 1, 3, 5, 7, 9, 11, 13, 15]
    want = [(r, values["eval/aime"]) for r, values in logged]
    best = max(want, key=lambda p: (p[1], -p[0]))
    [aime] = status["evaluation"]
    assert (aime["baseline"], aime["baselineRollout"]) == (want[0][1], want[0][0])
    assert (aime["best"], aime["bestRollout"]) == (best[1], best[0])
    assert (aime["last"], aime["lastRollout"]) == (want[-1][1], want[-1][0])
    assert [(p["rollout"], p["score"]) for p in aime["history"]] == want
    assert (aime["truncatedRatio"], aime["noneRewardRatio"]) == (0.125, 0.0)
    checkpoints = f"{tmp_path}/shared/grpo/{ns}/scored/checkpoints"
    outputs = status["outputs"]
    assert outputs["checkpointPath"] == f"{checkpoints}/iter_0000015"
    assert outputs["checkpointIteration"] == 15 and outputs["huggingfaceVerified"] is True, outputs
    assert outputs["huggingfacePath"] == outputs["checkpointPath"].replace("/iter_", "/hf/iter_")
    assert (Path(outputs["huggingfacePath"]) / "config.json").is_file()
    result = grpo("results", "scored", "-n", ns, "--kubeconfig", str(cluster.kubeconfig))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "scored: Succeeded/Succeeded, 16/16 rollouts"
    row = ["aime", f"{want[0][1]:.4g}", f"@{want[0][0]}", f"{best[1]:.4g}", f"@{best[0]}", f"{want[-1][1]:.4g}"]
    assert lines[2].split()[:7] == [*row, f"@{want[-1][0]}"]
    assert f"hugging face export: {outputs['huggingfacePath']} (verified)" in lines
    as_json = json.loads(grpo("results", "scored", "-n", ns, "--kubeconfig", str(cluster.kubeconfig), "--json").stdout)
    assert as_json["evaluation"] == status["evaluation"] and as_json["outputs"] == outputs
    missing = grpo("results", "nope", "-n", ns, "--kubeconfig", str(cluster.kubeconfig))
    assert missing.returncode == 1 and missing.stderr.strip() == (
        f"grpo results: GRPORun nope in namespace {ns} does not exist; list them with kubectl get grporuns -n {ns}"
    )


def test_an_eval_score_falling_while_the_reward_rises_stops_the_run_with_eval_regressed(env, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _op, ns, cluster, _ray_url = env
    kubectl = cluster.kubectl
    rising = ",".join(f"{0.3 + i / 200:g}" for i in range(200))
    spec = _spec(
        tmp_path,
        "--fake-eval-score",
        ",".join(["0.6"] * 30 + ["0.5"]),  # the drop after about 25 s: past the operator's first scrapes
        "--fake-reward",
        rising,
        rollouts=200,
        guards={"action": "Stop", "evalRegression": {"maxDrop": 0.05, "after": 2}},
    )
    kubectl("apply", "-f", "-", input=manifest("hacked", ns, spec))
    run = wait_for("Failed", lambda: phase_is(kubectl, ns, "hacked", "Failed", "Succeeded"), timeout=180)
    status = run["status"]
    assert status["reason"] == "EvalRegressed", status
    assert "more than guards.evalRegression.maxDrop 0.05 below its best 0.6" in status["message"]
    assert [b["trigger"] for b in status["forensics"]] == ["EvalRegressed"]
    assert next(c for c in status["conditions"] if c["type"] == "Healthy")["reason"] == "EvalRegressed"


def test_a_missing_hugging_face_export_ends_failed_export_missing(env, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _op, ns, cluster, _ray_url = env
    kubectl = cluster.kubectl
    spec = _spec(tmp_path, "--fake-skip-hf-export", rollouts=3)
    kubectl("apply", "-f", "-", input=manifest("unexported", ns, {**spec, "export": {"huggingface": True}}))
    run = wait_for("Failed", lambda: phase_is(kubectl, ns, "unexported", "Failed", "Succeeded"), timeout=180)
    status = run["status"]
    assert status["reason"] == "ExportMissing", status
    assert "Hugging Face export missing" in status["message"] and "/hf/iter_0000002 does not exist" in status["message"]
    assert status["outputs"]["huggingfaceVerified"] is False
