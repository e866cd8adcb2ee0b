"""`grpo`'s YAML loader decodes scalars and keys exactly as kubectl decodes them (the real kubectl, against the
session's control plane)."""

from __future__ import annotations

import json

import pytest

SCALARS = [
    "1e-6",
    "1e-06",
    "1E+3",
    "0x1F",
    "0o17",
    "017",
    "08",
    "1_000",
    "+12",
    "-0",
    "9223372036854775808",
    "18446744073709551616",
    "99999999999999999999",
    "1e400",
    ".5",
    "yes",
    "No",
    "on",
    "OFF",
    "y",
    "n",
    "True",
    "~",
    "null",
    "",
    "2026-01-01",
    "2026-13-45",
    "1:20",
    "0b101",
    "'5'",
    "!!str 5",
    "!!float 3",
    "!foo bar",
    "12abc",
    "+",
    ".",
]


def same(ours: object, theirs: object) -> bool:
    """Equal as kubectl prints them: its JSON numbers are float64, so beyond 2**53 compare as floats."""
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (ours, theirs))
    return float(ours) == float(theirs) if numbers else (type(ours), ours) == (type(theirs), theirs)  # type: ignore[arg-type]


@pytest.mark.integration
def test_scalars_and_keys_decode_exactly_as_kubectl_decodes_them(kubectl) -> None:  # type: ignore[no-untyped-def]
    from grpo_operator.cli.yamldecode import decode_all

    values = "\n".join(f"    v{i}: {s}" for i, s in enumerate(SCALARS))
    keys = "\n".join(f"    {k}: k" for k in ("1", "0x10", "true", "y", "2026-01-01", "1.5e3x"))
    text = f"apiVersion: grpo.dev/v1alpha1\nkind: GRPORun\nmetadata:\n  name: probe\nspec:\n  values:\n{values}\n  keys:\n{keys}\n"
    printed = kubectl("create", "--dry-run=client", "-o", "json", "-f", "-", input=text).stdout
    ours = json.loads(json.dumps(decode_all(text)[0]))
    theirs = json.loads(printed)["spec"]
    differ = {
        k: (ours["spec"]["values"].get(k), v)
        for k, v in theirs["values"].items()
        if not same(ours["spec"]["values"].get(k), v)
    }
    assert not differ, {SCALARS[int(k[1:])]: d for k, d in differ.items()}
    assert ours["spec"]["keys"] == theirs["keys"]
