"""The worker's caches charge each entry the bytes its objects keep alive, each object once, and give up on
an entry with too many objects; the least recently used entry goes first, and a budget of 0 keeps nothing."""

from __future__ import annotations

import sys

from reward_service.cache import ByteLRU, deep_size


class _Slots:
    __slots__ = ("args",)  # a sympy node: the whole tree hangs off .args

    def __init__(self, *args: object) -> None:
        self.args = args


class _Plain:
    def __init__(self, text: str) -> None:
        self.text = text


def test_an_entry_is_charged_the_keys_values_items_and_attributes_it_holds() -> None:
    big = "y" * 10_000
    for holder in ({big: 1}, {1: big}, [big], (big,), {big}, _Slots(big), _Plain(big)):
        size = deep_size(holder)
        assert size is not None and size >= sys.getsizeof(big), type(holder).__name__


def test_an_object_reached_twice_is_charged_once() -> None:
    big = "y" * 10_000
    once = deep_size([big])
    twice = deep_size([big, big])
    assert once is not None and twice is not None and twice - once < 100  # one more pointer, not 10 KB
    loop: list[object] = []
    loop.append(loop)
    assert deep_size(loop) == sys.getsizeof(loop)


def test_a_value_with_more_objects_than_the_bound_is_not_measured_and_not_kept() -> None:
    numbers = [1_000 + i for i in range(500)]  # 501 objects with the list
    assert deep_size(numbers, max_nodes=501) is not None
    assert deep_size(numbers, max_nodes=500) is None
    computed: list[int] = []

    def compute(key: int) -> list[int]:
        computed.append(key)
        return [1_000_000 + i for i in range(300_000)]

    cache: ByteLRU[int, list[int]] = ByteLRU(compute, max_bytes=1 << 40)
    assert len(cache(1)) == 300_000
    assert len(cache(1)) == 300_000
    assert computed == [1, 1] and len(cache) == 0


def test_the_least_recently_used_entry_is_evicted_first_and_a_hit_refreshes_it() -> None:
    computed: list[str] = []

    def compute(key: str) -> str:
        computed.append(key)
        return key.upper()

    one = deep_size("k0", "K0")
    assert one is not None
    cache: ByteLRU[str, str] = ByteLRU(compute, max_bytes=8 * one)  # room for eight entries
    assert [cache(f"k{i}") for i in range(8)] == [f"K{i}" for i in range(8)]
    assert cache("k0") == "K0" and computed.count("k0") == 1  # a hit: k0 is now the most recent
    cache("k8")  # the ninth entry evicts the least recent, k1
    assert cache.bytes <= 8 * one and len(cache) == 8
    cache("k0")
    cache("k1")
    assert computed.count("k0") == 1 and computed.count("k1") == 2


def test_a_budget_of_zero_keeps_nothing() -> None:
    computed: list[str] = []
    cache: ByteLRU[str, str] = ByteLRU(lambda key: computed.append(key) or key, max_bytes=0)
    assert (cache("a"), cache("a")) == ("a", "a")
    assert computed == ["a", "a"] and cache.bytes == 0
