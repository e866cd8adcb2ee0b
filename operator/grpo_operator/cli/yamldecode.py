"""Decode untrusted YAML the way kubectl does, with bounds: the only YAML reader for user files.

kubectl reads manifests with sigs.k8s.io/yaml v1.6.0 (`YAMLToJSON`), which decodes with
go.yaml.in/yaml/v2 v2.4.2 and converts the result to JSON. This module mirrors what a user can observe of
that path, so `grpo validate` and `kubectl apply` read the same file the same way:

- scalars resolve by go-yaml's table: `1e-6` and `1e-06` are floats, `0x1F`,
  `0o17`, `017` and `1_000` are integers, `yes`/`no`/`on`/`off`/`y`/`n` are booleans (YAML 1.1), integers
  outside 64 bits become floats and then strings, and timestamps stay strings;
- an explicit `!!int`/`!!float`/`!!bool`/`!!null` tag on a value that is not one is refused, as go-yaml's
  "cannot decode !!str `x` as a !!int"; unknown tags leave the string as written;
- alias expansion is budgeted exactly as go-yaml does (past 1000 decoded nodes, at most
  99% of them may come from aliases, falling to 10% at 4 million), and an anchor that contains itself is
  refused;
- map keys that are integers or booleans become their decimal / `true` text, as sigs.k8s.io/yaml does;
  other non-string keys (null, floats, lists) are refused.

On top of that, bounds kubectl gets from the API server: a file larger than the API server's request
limit (3 MiB, k8s.io/apiserver's `MaxRequestBodyBytes`) and nesting deeper than `MAX_DEPTH` are refused
before anything is built. Events come from libyaml's C parser where PyYAML has it (it keeps its own
stack, so deep nesting cannot exhaust Python's); the tree is built here without recursion. Every
refusal is a `YamlError`: one line with the line and column where it happened. The go-yaml source each
rule follows: docs/integrations/kubernetes.md.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

MAX_BYTES = 3 * 1024 * 1024
MAX_DEPTH = 64
ECHO_CHARS = 60

_ALIAS_RATIO_LOW = 400_000
_ALIAS_RATIO_HIGH = 4_000_000
_TAG = "tag:yaml.org,2002:"

_BOOL = {s: True for s in ("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON")}
_BOOL |= {s: False for s in ("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF")}
_NULL = frozenset(("", "~", "null", "Null", "NULL"))
_SPECIAL_FLOAT = {".nan": math.nan, ".NaN": math.nan, ".NAN": math.nan}
_SPECIAL_FLOAT |= {p + s: math.inf for p in ("", "+") for s in (".inf", ".Inf", ".INF")}
_SPECIAL_FLOAT |= {"-" + s: -math.inf for s in (".inf", ".Inf", ".INF")}
_YAML_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_DOT_FLOAT = re.compile(r"\.[0-9]+([eE][-+]?[0-9]+)?")
_DIGITS = {
    2: re.compile(r"[01]+"),
    8: re.compile(r"[0-7]+"),
    10: re.compile(r"[0-9]+"),
    16: re.compile(r"[0-9a-fA-F]+"),
}
_INT64 = (-(2**63), 2**63 - 1)
_UINT64_MAX = 2**64 - 1


class YamlError(ValueError):
    """A file kubectl would not read, or one past our bounds: one line, with its position."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.where, self.reason = where, reason


def echo(value: object, limit: int = ECHO_CHARS) -> str:
    """A value as a message may quote it: repr-escaped (no control characters) and cut to `limit`."""
    text = value if isinstance(value, str) else str(value)
    shown = repr(text[: limit + 1])[1:-1]
    return shown[:limit] + "..." if len(text) > limit or len(shown) > limit else shown


def _where(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "unknown position"


def _go_parse_int(text: str) -> int | None:
    """strconv.ParseInt/ParseUint(text, 0, 64) as go-yaml calls them."""
    sign, body = (text[0], text[1:]) if text[:1] in "+-" else ("", text)
    base, digits = 10, body
    if body[:2] in ("0x", "0X"):
        base, digits = 16, body[2:]
    elif body[:2] in ("0o", "0O"):
        base, digits = 8, body[2:]
    elif body[:2] in ("0b", "0B"):
        base, digits = 2, body[2:]
    elif body[:1] == "0" and len(body) > 1:
        base, digits = 8, body[1:]
    if len(digits) > 64 or not _DIGITS[base].fullmatch(digits):
        return None
    value = int(digits, base) * (-1 if sign == "-" else 1)
    if _INT64[0] <= value <= _INT64[1] or (sign == "" and value <= _UINT64_MAX):
        return value
    return None


def _go_parse_float(text: str) -> float | None:
    """strconv.ParseFloat(text, 64) for the decimal forms go-yaml hands it: None when out of range."""
    value = float(text)
    return None if math.isinf(value) else value


def resolve_plain(value: str) -> Any:
    """The value go-yaml v2 gives an untagged plain scalar."""
    first = value[:1]
    if value in _NULL:
        return None
    if value in _BOOL:
        return _BOOL[value]
    if value in _SPECIAL_FLOAT:
        return _SPECIAL_FLOAT[value]
    if first == ".":
        return _go_parse_float(value) if _DOT_FLOAT.fullmatch(value) else value
    if (first.isdigit() and first.isascii()) or first in ("+", "-"):
        plain = value.replace("_", "")
        if plain and plain not in "+-":
            number = _go_parse_int(plain)
            if number is not None:
                return number
            if _YAML_FLOAT.fullmatch(plain):
                floated = _go_parse_float(plain)
                if floated is not None:
                    return floated
    return value


def _resolve_tagged(tag: str, value: str, mark: Any) -> Any:
    """A scalar with an explicit tag: checked like go-yaml's resolve."""
    short = "!!" + tag[len(_TAG) :] if tag.startswith(_TAG) else tag
    if short == "!!binary":
        try:
            return base64.b64decode("".join(value.split()), validate=True).decode("utf-8", "replace")
        except binascii.Error:
            raise YamlError(_where(mark), "!!binary value contains invalid base64 data") from None
    if short == "!!str" or short not in ("!!int", "!!float", "!!bool", "!!null", "!!timestamp"):
        return value
    resolved = resolve_plain(value)
    kinds = {"!!int": int, "!!float": float, "!!bool": bool, "!!null": type(None), "!!timestamp": str}
    if short == "!!float" and isinstance(resolved, int) and not isinstance(resolved, bool):
        return float(resolved)
    expected = kinds[short]
    if type(resolved) is expected and short != "!!timestamp":
        return resolved
    if short == "!!timestamp" and re.match(r"[0-9]{4}-", value):
        return value
    raise YamlError(_where(mark), f"cannot decode {echo(value)!r} as a {short}; remove the tag or fix the value")


def _key_text(key: Any, mark: Any) -> str:
    """A mapping key as sigs.k8s.io/yaml turns it into a JSON key."""
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int):
        return str(key)
    shown = {dict: "a mapping", list: "a list", type(None): "null"}.get(type(key)) or echo(repr(key))
    raise YamlError(_where(mark), f"mapping key {shown} is not a string; write the key as a quoted string")


def _allowed_alias_ratio(decodes: int) -> float:
    """go-yaml's allowedAliasRatio."""
    if decodes <= _ALIAS_RATIO_LOW:
        return 0.99
    if decodes >= _ALIAS_RATIO_HIGH:
        return 0.10
    return 0.99 - 0.89 * (decodes - _ALIAS_RATIO_LOW) / (_ALIAS_RATIO_HIGH - _ALIAS_RATIO_LOW)


@dataclass
class _Open:
    """A mapping or sequence whose end event has not come yet."""

    value: dict[str, Any] | list[Any]
    anchor: str | None
    mark: Any
    size: int = 1
    pending_key: Any = None
    key_mark: Any = None
    has_key: bool = False
    merges: list[dict[str, Any]] = field(default_factory=list)
    merge_next: bool = False


@dataclass
class _Budget:
    """go-yaml's per-document decode and alias counters."""

    decodes: int = 0
    aliased: int = 0

    def spend(self, nodes: int, *, via_alias: bool, mark: Any) -> None:
        self.decodes += nodes
        if via_alias:
            self.aliased += nodes
        if (
            self.aliased > 100
            and self.decodes > 1000
            and self.aliased / self.decodes > _allowed_alias_ratio(self.decodes)
        ):
            raise YamlError(
                _where(mark),
                "document contains excessive aliasing (as kubectl refuses it); "
                "write the repeated parts out or use fewer aliases",
            )


class _Builder:
    """Builds one document's value from parser events, iteratively, within the budget."""

    def __init__(self) -> None:
        self.stack: list[_Open] = []
        self.anchors: dict[str, tuple[Any, int]] = {}
        self.open_anchors: set[str] = set()
        self.budget = _Budget()
        self.root: Any = None
        self.done = False

    def _add(self, value: Any, size: int, mark: Any, *, is_merge_key: bool = False) -> None:
        if not self.stack:
            self.root, self.done = value, True
            return
        top = self.stack[-1]
        top.size += size
        if isinstance(top.value, list):
            top.value.append(value)
            return
        if not top.has_key:
            if is_merge_key:
                top.merge_next, top.has_key = True, True
                return
            top.pending_key, top.key_mark, top.has_key = _key_text(value, mark), mark, True
            return
        top.has_key = False
        if top.merge_next:
            top.merge_next = False
            sources = value if isinstance(value, list) else [value]
            if not all(isinstance(s, dict) for s in sources):
                raise YamlError(_where(mark), "a merge key (<<) takes a mapping or a list of mappings")
            top.merges.extend(sources)
            return
        top.value[top.pending_key] = value

    def scalar(self, event: yaml.ScalarEvent) -> None:
        mark = event.start_mark
        self.budget.spend(1, via_alias=False, mark=mark)
        plain = event.implicit[0] and event.tag in (None, "!")
        if event.tag in (None, "!"):
            value: Any = resolve_plain(event.value) if plain and event.tag is None else event.value
        else:
            value = _resolve_tagged(event.tag, event.value, mark)
        is_merge = plain and event.value == "<<" and bool(self.stack) and isinstance(self.stack[-1].value, dict)
        if event.anchor is not None:
            self.anchors[event.anchor] = (value, 1)
        self._add(value, 1, mark, is_merge_key=is_merge and not self.stack[-1].has_key)

    def alias(self, event: yaml.AliasEvent) -> None:
        mark, name = event.start_mark, event.anchor
        if name in self.open_anchors:
            raise YamlError(
                _where(mark), f"anchor {echo(name)!r} value contains itself; an alias cannot refer to its own parent"
            )
        if name not in self.anchors:
            raise YamlError(
                _where(mark), f"unknown anchor {echo(name)!r} referenced; define it (&{echo(name)}) before the alias"
            )
        value, size = self.anchors[name]
        self.budget.spend(size, via_alias=True, mark=mark)
        self._add(value, size, mark)

    def start(self, event: yaml.MappingStartEvent | yaml.SequenceStartEvent) -> None:
        mark = event.start_mark
        if len(self.stack) >= MAX_DEPTH:
            raise YamlError(_where(mark), f"nested deeper than {MAX_DEPTH} levels; no GRPORun field is that deep")
        self.budget.spend(1, via_alias=False, mark=mark)
        value: dict[str, Any] | list[Any] = {} if isinstance(event, yaml.MappingStartEvent) else []
        if event.anchor is not None:
            self.open_anchors.add(event.anchor)
        self.stack.append(_Open(value=value, anchor=event.anchor, mark=mark))

    def end(self) -> None:
        node = self.stack.pop()
        if isinstance(node.value, dict) and node.merges:
            merged: dict[str, Any] = {}
            for source in reversed(node.merges):
                merged.update(source)
            merged.update(node.value)
            node.value = merged
        if node.anchor is not None:
            self.open_anchors.discard(node.anchor)
            self.anchors[node.anchor] = (node.value, node.size)
        self._add(node.value, node.size, node.mark)


def _error(exc: yaml.YAMLError) -> YamlError:
    mark = getattr(exc, "problem_mark", None)
    reason = getattr(exc, "problem", None) or (str(exc).splitlines() or ["unreadable"])[0]
    if mark is None and isinstance(exc, yaml.reader.ReaderError):
        return YamlError(f"character {exc.position + 1}", echo(reason, 200))
    return YamlError(_where(mark), echo(reason, 200))


def _events(text: str) -> Any:
    loader_class = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    loader = loader_class(text)
    try:
        while loader.check_event():
            yield loader.get_event()
    finally:
        loader.dispose()


def decode_all(text: str) -> list[Any]:
    """Every document in `text`, decoded as kubectl decodes it; raises `YamlError` with the position."""
    if len(text) > MAX_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise YamlError(
            "whole file",
            f"larger than {MAX_BYTES // (1024 * 1024)} MiB, the most the Kubernetes API server accepts in one request",
        )
    documents: list[Any] = []
    builder: _Builder | None = None
    try:
        for event in _events(text):
            if isinstance(event, yaml.DocumentStartEvent):
                builder = _Builder()
            elif builder is None or isinstance(event, (yaml.StreamStartEvent, yaml.StreamEndEvent)):
                continue
            elif isinstance(event, yaml.DocumentEndEvent):
                documents.append(builder.root)
                builder = None
            elif isinstance(event, yaml.ScalarEvent):
                builder.scalar(event)
            elif isinstance(event, yaml.AliasEvent):
                builder.alias(event)
            elif isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                builder.start(event)
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                builder.end()
    except yaml.YAMLError as exc:
        raise _error(exc) from None
    return documents
