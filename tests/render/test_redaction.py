"""The logs the operator keeps hold no secret of the run: the job's log tail (ConfigMap `<run>-job-logs`) and an
evidence bundle built from a log that printed a secretEnv value show `<redacted>` where the value was, as they do
for the Ray token; the values come from the caller (the Secrets as read at keeping time) and from the spec (a
credential in extraArgs)."""

from __future__ import annotations

import base64
import gzip
import json

from grpo_operator.cli.loading import parse_run
from grpo_operator.render.evidence import evidence_config_map
from grpo_operator.render.joblogs import job_logs_config_map
from grpo_operator.render.redaction import MIN_SECRET_CHARS, REDACTED, redact, run_secrets

from tests.support.builders import example

WANDB = "wandb-canary-0f1e2d3c4b5a69788796"
TOKEN = "ray-token-canary-0123456789abcdef"
LOG = (
    "rollout 1: reward 0.5\n"
    f"wandb: Appending key for api.wandb.ai to your netrc file: {WANDB}\n"
    f"  wandb_key ....................................... {WANDB}\n"
    f"RAY_AUTH_TOKEN={TOKEN}\n"
    "rollout 2: reward 0.6\n"
)


def test_the_kept_log_tail_shows_redacted_where_the_secret_was_and_counts_the_kept_bytes() -> None:
    manifest, ref = job_logs_config_map("ns", "r", "uid-1", "grpo-r-1", LOG, secrets=[TOKEN, WANDB])
    kept = manifest["data"]["job.log"]
    assert WANDB not in json.dumps(manifest) and TOKEN not in json.dumps(manifest)
    assert kept.count(REDACTED) == 3 and REDACTED == "<redacted>"
    assert kept.startswith("rollout 1: reward 0.5\n") and kept.endswith("rollout 2: reward 0.6\n")
    assert ref.bytes == len(kept.encode())


def test_a_log_kept_without_secrets_is_kept_as_printed() -> None:
    manifest, _ = job_logs_config_map("ns", "r", "uid-1", "grpo-r-1", LOG)
    assert manifest["data"]["job.log"] == LOG


def test_an_evidence_bundle_of_a_log_with_the_secret_holds_redacted_instead() -> None:
    job = json.dumps({"message": f"Job failed, last logs: wandb key {WANDB}"})
    bundle = evidence_config_map(
        "ns",
        "r",
        "uid-1",
        "r-forensics-1",
        header={"trigger": "Stalled", "note": WANDB},
        pieces={"driver.log": LOG, "job.json": job},
        secrets=[TOKEN, WANDB],
    )
    kept = {k: gzip.decompress(base64.b64decode(v)).decode() for k, v in bundle["binaryData"].items()}
    text = json.dumps(kept) + json.dumps(bundle)
    assert WANDB not in text and TOKEN not in text
    assert kept["driver.log.gz"].count(REDACTED) == 3 and REDACTED in kept["job.json.gz"]
    assert f"note: {REDACTED}" in bundle["data"]["index.txt"]


def test_a_secret_read_from_a_file_with_its_newline_is_redacted_where_it_is_printed_without() -> None:
    assert redact(f"key={WANDB} next", [WANDB + "\n"]) == f"key={REDACTED} next"


def test_a_secret_inside_another_leaves_no_piece_of_the_longer_one() -> None:
    longer = WANDB + "-suffix"
    assert redact(f"a {longer} b {WANDB}", [WANDB, longer]) == f"a {REDACTED} b {REDACTED}"


def test_a_value_too_short_to_be_a_secret_leaves_the_log_readable() -> None:
    short = "x" * (MIN_SECRET_CHARS - 1)
    assert redact(f"max{short} rollout", [short, ""]) == f"max{short} rollout"
    assert redact("rollout abcd", ["abcd"]) == f"rollout {REDACTED}"


def test_the_runs_secrets_are_the_known_values_and_the_credentials_in_its_extra_args() -> None:
    run, problems = parse_run(example("quickstart", {"extraArgs": ["--use-wandb", "--wandb-key", WANDB]}))
    assert run is not None, problems  # refused by check(), but a run made before the rule may still be running
    assert run_secrets(run, [TOKEN, None, "from-a-secret"]) == [TOKEN, "from-a-secret", WANDB]
