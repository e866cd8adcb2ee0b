"""A least-recently-used cache bounded by the bytes its entries keep alive, not by their number.

A worker caches math_verify parses (sympy trees) and verdicts. Their size follows the text: a parse of a
100k-character answer keeps about 300 KB, so a cache of 4096 entries could hold more than a gigabyte per
worker. `ByteLRU` charges each entry its measured size (`deep_size`: every object reachable from key and
value through containers and sympy's `args`, each counted once, as `sys.getsizeof` reports it) and evicts
the least recently used entries until the total is under the budget. An entry larger than an eighth of
the budget is not kept at all, so one huge answer cannot flush everything else.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_MAX_NODES = 200_000


def deep_size(*roots: object, max_nodes: int = _MAX_NODES) -> int | None:
    """Bytes of every object reachable from `roots` (each once); None when more than `max_nodes` objects."""
    seen: set[int] = set()
    stack: list[object] = list(roots)
    total = 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if len(seen) > max_nodes:
            return None
        total += sys.getsizeof(obj)
        if isinstance(obj, str | bytes | int | float | bool) or obj is None:
            continue
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, list | tuple | set | frozenset):
            stack.extend(obj)
        else:
            args = getattr(obj, "args", None)  # sympy.Basic: the whole tree hangs off .args
            if isinstance(args, tuple):
                stack.append(args)
            attributes = getattr(obj, "__dict__", None)
            if isinstance(attributes, dict):
                stack.append(attributes)
    return total


class ByteLRU(Generic[K, V]):
    """An LRU cache for `compute(key)` holding at most `max_bytes` of keys and values."""

    def __init__(self, compute: Callable[[K], V], max_bytes: int) -> None:
        self._compute = compute
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __call__(self, key: K) -> V:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            return entry[0]
        value = self._compute(key)
        size = deep_size(key, value) if self.max_bytes > 0 else None
        if size is None or size > self.max_bytes // 8:
            return value
        self._entries[key] = (value, size)
        self.bytes += size
        while self.bytes > self.max_bytes:
            _, (_, evicted) = self._entries.popitem(last=False)
            self.bytes -= evicted
        return value
