"""YAML texts where readers differ, shared by `grpo validate`'s decoding tests (tests/cli) and the comparison with
the real kubectl (tests/integration/cli): strings a YAML 1.1 reader would take for numbers, booleans or null, and
merge keys with what kubectl (sigs.k8s.io/yaml over go-yaml v2) makes of each: a merge key overrides the keys
before it and the keys after it override the merge; of a list of mappings the first wins, of two merge keys the
later."""

from __future__ import annotations

STRINGS_THAT_LOOK_TYPED = ["1e3", "08", "0o17", "0x1F", "0b101", "1_000", ".5", "+1", "-.5e3", "0.", "yes", "y", "On"]
STRINGS_THAT_LOOK_TYPED += ["NO", "~", "null", "Null", "", "true", ".inf", "-.Inf", ".NaN", "1e+03", "012", "<<", "="]

# name -> (a document whose key `d` holds a merge, what kubectl reads as `d`)
MERGES: dict[str, tuple[str, dict[str, str]]] = {
    "merge after a key": ("b: &b {a: '2', c: '2'}\nd:\n  a: '1'\n  <<: *b\n", {"a": "2", "c": "2"}),
    "merge before a key": ("b: &b {a: '2', c: '2'}\nd:\n  <<: *b\n  a: '1'\n", {"a": "1", "c": "2"}),
    "merge of a list": ("b1: &b1 {a: '1'}\nb2: &b2 {a: '2', c: '2'}\nd:\n  <<: [*b1, *b2]\n", {"a": "1", "c": "2"}),
    "two merge keys": ("b1: &b1 {a: '1'}\nb2: &b2 {a: '2', c: '2'}\nd:\n  <<: *b1\n  <<: *b2\n", {"a": "2", "c": "2"}),
    "nested merge": ("b: &b {a: '2'}\nc: &c {<<: *b, e: '3'}\nd:\n  e: '1'\n  <<: *c\n", {"a": "2", "e": "3"}),
}
