"""The evidence bundle fits a ConfigMap whatever the job printed, keeps each piece's last lines, lists what it
left out, holds no secret, and belongs to the run (it goes when the run is deleted)."""

from __future__ import annotations

import base64
import gzip
import json
import os

from grpo_operator.render.evidence import PIECE_BYTES, evidence_config_map

TOKEN = "grpo-canary-0123456789abcdef"
HF = "hf_" + "A1b2C3d4" * 5


def _bundle(pieces: dict[str, str]) -> dict[str, object]:
    return evidence_config_map(
        "ns", "run", "uid-1", "run-forensics-1", header={"trigger": "Stalled"}, pieces=pieces, secrets=[TOKEN]
    )


def _kept(bundle: dict[str, object]) -> dict[str, str]:
    binary = bundle["binaryData"]
    assert isinstance(binary, dict)
    return {k: gzip.decompress(base64.b64decode(v)).decode() for k, v in binary.items()}


def test_a_flood_of_output_keeps_its_last_lines_within_a_configmap() -> None:
    flood = "".join(f"line {i} {'y' * 100}\n" for i in range(200_000)) + "the last line\n"  # about 21 MiB
    bundle = _bundle({"driver.log": flood})
    kept = _kept(bundle)["driver.log.gz"]
    assert kept.endswith("the last line\n") and len(kept.encode()) <= PIECE_BYTES and kept.startswith("line ")
    assert len(json.dumps(bundle).encode()) < 1024 * 1024
    index = bundle["data"]["index.txt"]  # type: ignore[index]
    assert "driver.log.gz" in index and "the tail of a longer text" in index


def test_pieces_past_the_total_bound_are_listed_as_left_out() -> None:
    noise = {f"stacks-{i}.txt": os.urandom(PIECE_BYTES // 2).hex() for i in range(8)}  # incompressible
    bundle = _bundle(noise)
    assert len(json.dumps(bundle).encode()) < 1024 * 1024
    index = bundle["data"]["index.txt"]  # type: ignore[index]
    assert "left out, the bundle is full" in index and len(_kept(bundle)) < 8


def test_no_token_reaches_a_bundle() -> None:
    bundle = _bundle({"job.json": f'{{"env": "RAY_AUTH_TOKEN={TOKEN}", "hf": "{HF}"}}', "stacks.txt": TOKEN})
    text = json.dumps(_kept(bundle)) + json.dumps(bundle)
    assert TOKEN not in text and HF not in text and "<redacted>" in text


def test_the_bundle_belongs_to_the_run() -> None:
    meta = _bundle({})["metadata"]
    assert meta["ownerReferences"][0]["name"] == "run" and meta["ownerReferences"][0]["uid"] == "uid-1"  # type: ignore[index]
