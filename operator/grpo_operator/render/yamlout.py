"""YAML output of manifests: multi-line strings (the run config JSON) as literal blocks, keys in order, and
every string a YAML reader could take for another type quoted.

PyYAML's dumper quotes what its own YAML 1.1 resolver would read as a number, boolean or null, but kubectl
reads manifests with go-yaml v2, which also takes `1e3`, `08`, `0o17`, `0b101` and `1_000` for numbers, and a
YAML 1.2 reader takes `0o17` and `.5` for numbers too. `_reads_as_another_type` is the union of those
readers' implicit types, so a rendered string reaches kubectl as the same string.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import yaml

# YAML 1.1 booleans and nulls in the spellings go-yaml v2 and PyYAML resolve (YAML 1.2 core's are a subset).
_WORDS = frozenset(
    f(word)
    for word in ("y", "yes", "true", "on", "n", "no", "false", "off", "null", "~")
    for f in (str.lower, str.capitalize, str.upper)
)
# Numbers of any of the readers, underscores removed first (go-yaml v2 and YAML 1.1 allow them in numbers):
# decimal, 0x/0o/0b and leading-zero octal integers, decimal floats with or without a dot or exponent, and
# the special floats.
_NUMBER = re.compile(
    r"[-+]?(0[xX][0-9a-fA-F]*|0[oO][0-7]*|0[bB][01]*|[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?|\.[0-9]+([eE][-+]?[0-9]+)?"
    r"|\.(inf|Inf|INF|nan|NaN|NAN))"
)


def _reads_as_another_type(value: str) -> bool:
    return value in _WORDS or value in ("", "<<", "=") or bool(_NUMBER.fullmatch(value.replace("_", "")))


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else ("'" if _reads_as_another_type(value) else None)
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump_all(documents: Iterable[dict[str, Any]]) -> str:
    return yaml.dump_all(list(documents), Dumper=_Dumper, sort_keys=False, width=120)
