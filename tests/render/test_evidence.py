"""The evidence bundle fits a ConfigMap whatever the job printed, keeps each piece's last lines, lists what it
left out, holds no secret, and belongs to the run (it goes when the run is deleted)."""

from __future__ import annotations

import base64
import gzip
import json
import os
from pathlib import Path

from grpo_operator.render import names
from grpo_operator.render.evidence import PIECE_BYTES, TOTAL_BYTES, evidence_config_map

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


def test_as_many_pieces_are_kept_as_fit_the_bundle_in_order() -> None:
    # Incompressible pieces of about 170 KiB as base64: five fit the 900 KiB budget, the sixth would not.
    pieces = {f"stacks-{i}.txt": os.urandom(PIECE_BYTES // 2).hex()[: 250 * 1024] for i in range(7)}
    sizes = [len(base64.b64encode(gzip.compress(t.encode(), compresslevel=6, mtime=0))) for t in pieces.values()]
    fit = next(k for k in range(len(sizes) + 1) if k == len(sizes) or sum(sizes[: k + 1]) > TOTAL_BYTES)
    assert 0 < fit < len(sizes)
    bundle = _bundle(pieces)
    assert sorted(_kept(bundle)) == sorted(f"stacks-{i}.txt.gz" for i in range(fit))
    index = bundle["data"]["index.txt"]  # type: ignore[index]
    assert index.count("left out, the bundle is full") == len(sizes) - fit


def test_the_first_bundle_has_the_name_the_readme_tells_users_to_get() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "kubectl get cm <run>-forensics-1 " in readme
    assert names.forensics("my-run", 1) == "my-run-forensics-1"
    assert names.forensics("my-run", 2) == "my-run-forensics-2"
