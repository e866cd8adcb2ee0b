"""`grpo validate` on files crafted to hurt: each is answered with one line and exit 1, in bounded memory.

Each case runs the real `grpo` command in a child whose address space is capped (RLIMIT_AS), so a loader
that expands aliases or builds huge values dies with MemoryError (a traceback) instead of passing slowly.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys

import pytest
import yaml

from tests.support.builders import EXAMPLES

GRPO = [sys.executable, "-m", "grpo_operator.cli"]
MEMORY_CAP = 1536 * 1024 * 1024
QUICKSTART = (EXAMPLES / "quickstart.yaml").read_text()


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def validate(text: str | bytes, *extra: str) -> subprocess.CompletedProcess[bytes]:
    data = text.encode() if isinstance(text, str) else text
    return subprocess.run(
        [*GRPO, "validate", "-f", "-", *extra],
        check=False,
        input=data,
        capture_output=True,
        timeout=120,
        preexec_fn=_capped,
    )


def one_line_refusal(result: subprocess.CompletedProcess[bytes]) -> str:
    out, err = result.stdout.decode(), result.stderr.decode()
    assert "Traceback" not in out + err, err[-2000:]
    assert result.returncode == 1, (result.returncode, out[-500:], err[-500:])
    lines = (out + err).strip().splitlines()
    assert len(lines) == 1, lines[:5]
    assert len(lines[0]) < 300, lines[0][:400]
    return lines[0]


def laughs(levels: int, width: int = 9) -> str:
    """The billion-laughs shape: each level a list of `width` aliases to the level below (about 320 bytes)."""
    rows = ["a0: &a0 [" + ", ".join(['"lol"'] * width) + "]"]
    rows += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "\n".join(rows) + "\n"


def test_an_alias_bomb_is_refused_at_once_as_kubectl_refuses_it() -> None:
    line = one_line_refusal(validate(laughs(9)))
    assert "excessive aliasing" in line and "line " in line


def test_a_recursive_anchor_is_refused_with_its_position() -> None:
    line = one_line_refusal(validate("a: &x [1, *x]\n"))
    assert "contains itself" in line and "line 1" in line


@pytest.mark.parametrize("opener", ["[", "{a: "], ids=["lists", "mappings"])
@pytest.mark.parametrize("depth", [200, 100_000])
def test_deep_nesting_is_refused_with_one_line(opener: str, depth: int) -> None:
    line = one_line_refusal(validate("spec: " + opener * depth + "\n"))
    assert "line 1" in line and ("nested deeper" in line or "nesting depth" in line)


def test_a_file_larger_than_the_api_server_accepts_is_refused_without_reading_it_all() -> None:
    line = one_line_refusal(validate(QUICKSTART + "# " + "x" * (4 * 1024 * 1024) + "\n"))
    assert "larger than 3 MiB" in line


def test_non_utf8_bytes_name_their_position() -> None:
    line = one_line_refusal(validate(b"apiVersion: grpo.dev/v1alpha1\nkind: \xff\xfe\n"))
    assert "byte 37 is not UTF-8" in line


HOSTILE_SCALARS = {
    "an integer of 5000 digits": "numRollout: " + "9" * 5000,
    "an integer of 5000 digits as a key": "numRollout: 20\n    " + "9" * 5000 + ": 1",
    "an invalid date": "numRollout: 2026-13-45",
    "an invalid date as a key": "numRollout: 20\n    " + "2026-13-45: 1",
    "a date as a key": "numRollout: 20\n    " + "2026-01-01: 1",
    "!!int on a word": "numRollout: !!int twenty",
    "!!float on a word": "numRollout: !!float twenty",
    "!!int on a 5000-digit string": "numRollout: !!int " + "9" * 5000,
    "a null key": "numRollout: 20\n    " + "~: 1",
    "a list as a key": "numRollout: 20\n    " + "? [1, 2]\n    : 1",
    "a 1 MB string for a number": "numRollout: " + "x" * 1_000_000,
    "a control character in a string": 'numRollout: "\\x07\\x1b[2J"',
    "!!binary followed by a non-ASCII character": "numRollout: !!binary aGVsbG8=\u00e9",
    "!!binary that is not base64": "numRollout: !!binary not*base64",
}


@pytest.mark.parametrize("label", HOSTILE_SCALARS)
def test_hostile_scalars_get_one_line_and_no_traceback(label: str) -> None:
    text = QUICKSTART.replace("    numRollout: 20", "    " + HOSTILE_SCALARS[label])
    line = one_line_refusal(validate(text))
    assert "\x1b" not in line and "\x07" not in line


@pytest.mark.parametrize("written", ["1e-6", "1e-06", "1.0e-6", "1E-6", "5e-7"])
def test_learning_rate_in_exponent_form_reads_as_kubectl_reads_it(written: str) -> None:
    text = QUICKSTART.replace("    globalBatchSize: 128", f"    globalBatchSize: 128\n    learningRate: {written}")
    result = validate(text, "-o", "json")
    assert result.returncode == 0, result.stdout.decode()


def test_the_json_kubectl_get_prints_validates() -> None:
    doc = yaml.safe_load(QUICKSTART)
    doc["spec"]["training"]["learningRate"] = 1e-06
    as_json = json.dumps(doc, indent=4)
    assert "1e-06" in as_json
    assert validate(as_json).returncode == 0
