"""How miles's two argparse parsers read its argv, from the flag table: which tokens are values, what each value
must convert to, and what miles's pre-parser makes of a name it does not know exactly.

miles parses its command line twice (docs/integrations/miles.md, "Flag table"). First a pre-parser of miles's own
flags only, with argparse's default `allow_abbrev=True`, over the whole argv (`parse_args_train_backend`): a
name it does not know exactly is an abbreviation to it, and an ambiguous one, or one whose expansion lacks its
values, exits 2. Then Megatron's parser of every flag with `allow_abbrev=False`: an abbreviation is unknown and
exits 2, and every value is converted by the flag's type and checked against its choices. argparse reads a
token that starts with '-' as a flag unless it is a plain negative number (CPython 3.12 `_negative_number_matcher`),
so `-1e-8` after a flag is no value to it; one value is passed as `--flag=-1e-8`, which argparse always reads
as the value. This module does no I/O: the tables are `miles_flag_table` (dec268f7, the default) and
`miles_flag_table_v0_1_0`, generated from each supported miles version's pinned sources (`MILES_VERSIONS`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from grpo_operator.api.quote import echo
from grpo_operator.planning import miles_flag_table, miles_flag_table_v0_1_0

# The supported miles versions and their flag tables (grpo_dev.miles_flags.VERSIONS writes them); the first is
# the default.
MILES_VERSIONS = {"dec268f7": miles_flag_table, "v0.1.0": miles_flag_table_v0_1_0}
DEFAULT_MILES_VERSION = "dec268f7"

# CPython 3.12's Lib/argparse.py `_negative_number_matcher` (the image's Python runs cp312 wheels); later
# releases read more forms as numbers, so a token this matches is a value under every one of them.
PLAIN_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
PREPARSER = "miles's pre-parser (miles/utils/arguments.py:2377-2379, argparse's default allow_abbrev)"
MAIN_PARSER = "Megatron's parser (allow_abbrev=False, megatron/training/arguments.py:88-90)"
SHOWN_NAMES = 6


@dataclass(frozen=True)
class MilesFlag:
    names: tuple[str, ...]
    dest: str
    min_values: int
    max_values: int | None  # None: no limit
    condition: str  # empty: always exists
    kind: str = ""  # "int" or "float": argparse converts each value with it; empty: any string
    choices: tuple[str, ...] = ()  # empty: any value
    preparser: bool = False  # miles's pre-parser knows the name too


def pinned(version: str = DEFAULT_MILES_VERSION) -> str:
    """The pins of `version`'s flag table, as messages name them."""
    return str(MILES_VERSIONS[version].PINNED)


@cache
def miles_flags(version: str = DEFAULT_MILES_VERSION) -> dict[str, MilesFlag]:
    """Every name of miles's parser at `version`'s pins (its flag table), with its flag."""
    out: dict[str, MilesFlag] = {}
    for line in MILES_VERSIONS[version].TABLE.splitlines():
        names, dest, low, high, condition, kind, choices, pre = line.split("|")
        flag = MilesFlag(
            tuple(names.split()),
            dest,
            int(low),
            None if high == "*" else int(high),
            condition,
            kind,
            tuple(choices.split(",")) if choices else (),
            pre == "pre",
        )
        out.update(dict.fromkeys(flag.names, flag))
    return out


@cache
def preparser_names(version: str = DEFAULT_MILES_VERSION) -> tuple[str, ...]:
    """The option strings of miles's pre-parser: miles's own flags, and argparse's `--help`."""
    return tuple(sorted({n for n, f in miles_flags(version).items() if f.preparser} | {"--help"}))


def looks_like_value(token: str) -> bool:
    """Whether a token after a flag is meant as its value: not a flag, or a number (`-5`, `-1e-8`)."""
    if not token.startswith("-"):
        return True
    try:
        float(token)
    except ValueError:
        return False
    return True


def argparse_reads_as_value(token: str) -> bool:
    """Whether argparse takes a token after a flag as a value rather than as the next flag."""
    return not token.startswith("-") or bool(PLAIN_NEGATIVE_NUMBER.match(token))


def value_problem(flag: MilesFlag, name: str, value: str) -> str | None:
    """Why argparse refuses `value` for the flag (its type, then its choices), as "<value> is not ...", or None."""
    converted: object = value
    if flag.kind:
        try:
            converted = int(value) if flag.kind == "int" else float(value)
        except ValueError:
            return f"{echo(value)} is not {'an int' if flag.kind == 'int' else 'a float'}, which {name} takes"
    if flag.choices and str(converted) not in flag.choices:
        return f"{echo(value)} is not a choice of {name}"
    return None


def value_fix(flag: MilesFlag) -> str:
    """What to write instead of a value `value_problem` refuses."""
    if flag.choices:
        return f"write one of {', '.join(flag.choices)}"
    return f"write {'an int' if flag.kind == 'int' else 'a float'}"


def _listed(names: Sequence[str]) -> str:
    shown = ", ".join(names[:SHOWN_NAMES])
    return shown + (f" and {len(names) - SHOWN_NAMES} more" if len(names) > SHOWN_NAMES else "")


def abbreviation_problem(name: str, version: str = DEFAULT_MILES_VERSION) -> str | None:
    """Why a name that is no flag of the table is refused when it is the start of some (an abbreviation), or
    None when no flag starts with it."""
    longer = sorted(n for n in miles_flags(version) if n.startswith(name))
    if not longer:
        return None
    pre = [n for n in preparser_names(version) if n.startswith(name)]
    how = (
        f"{PREPARSER} finds it ambiguous ({_listed(pre)}) and exits 2"
        if len(pre) > 1
        else f"{MAIN_PARSER} does not expand it and exits 2"
    )
    return f"is an abbreviation: {how}; write the full flag: {_listed(longer)}"


def preparser_problem(args: Sequence[str], index: int, version: str = DEFAULT_MILES_VERSION) -> str | None:
    """Why miles's pre-parser exits 2 at `args[index]`, a full flag of the table it does not know by that name
    (a Megatron flag) but reads as an abbreviation of its own, or None when it reads it without complaint."""
    name, has_inline, inline = args[index].partition("=")
    flag = miles_flags(version)[name]
    if flag.preparser:
        return None
    pre = [n for n in preparser_names(version) if n.startswith(name)]
    if not pre:
        return None
    fix = f"miles cannot take {name} at this pin; remove it"
    if len(pre) > 1:
        return f"is ambiguous to {PREPARSER}, a start of {_listed(pre)}: it exits 2 before training; {fix}"
    read_as = miles_flags(version)[pre[0]]
    why: str | None
    if has_inline:
        why = "it takes no value" if read_as.max_values == 0 else value_problem(read_as, pre[0], inline)
    else:
        values: list[str] = []
        for token in args[index + 1 :]:
            if not argparse_reads_as_value(token) or (
                read_as.max_values is not None and len(values) >= read_as.max_values
            ):
                break
            values.append(token)
        why = f"it needs {read_as.min_values} value(s)" if len(values) < read_as.min_values else None
        why = why or next((w for v in values if (w := value_problem(read_as, pre[0], v))), None)
    if why is None:
        return None
    return f"is read by {PREPARSER} as its {pre[0]}, and it exits 2 before training ({why}); {fix}"


def joined_negative_values(args: Sequence[str]) -> list[str]:
    """`args` as miles's argv: a flag of one value followed by a negative number is written `--flag=-1e-8`, which
    argparse reads as the value in every form (`--flag -1e-8` it reads as two flags)."""
    out: list[str] = []
    i = 0
    while i < len(args):
        flag = miles_flags().get(args[i])
        nxt = args[i + 1] if i + 1 < len(args) else ""
        if flag is not None and flag.max_values == 1 and nxt.startswith("-") and looks_like_value(nxt):
            out.append(f"{args[i]}={nxt}")
            i += 2
            continue
        out.append(args[i])
        i += 1
    return out
