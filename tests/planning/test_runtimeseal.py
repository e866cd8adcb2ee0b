"""The seal on status.runtime: the operator's digest verifies the copy it wrote, as the API server gives it back,
and nothing else: a copy changed in any field, a sealed copy moved to another run or another generation, or a
digest made with another key does not verify, and the sentence says which of missing or wrong it is."""

from __future__ import annotations

import json

import pytest
import yaml
from grpo_operator.api.runtime import RuntimeRecord
from grpo_operator.planning.documents import parse_runtime
from grpo_operator.planning.runtime import record_of
from grpo_operator.planning.runtimeseal import RunRef, broken_seal, seal

from tests.support.builders import EXAMPLES

KEY = bytes(range(32))
RUN = RunRef("team-a", "grpo-x", "0b8f7c1e-uid")
# The InfiniBand example: image prefixes, a node limit and a locked field, as a platform team's runtime has.
_LOCKED, _ = parse_runtime(yaml.safe_load((EXAMPLES / "runtimes" / "h100-infiniband.yaml").read_text()))
assert _LOCKED is not None
RECORD = record_of(_LOCKED).model_copy(update={"resource_version": "41"})
SEALED = seal(KEY, RUN, 3, RECORD)


def _changed(**spec: object) -> RuntimeRecord:
    doc = json.loads(RECORD.model_dump_json(by_alias=True))
    for dotted, value in spec.items():
        tree = doc["spec"]
        *path, last = dotted.split("__")
        for key in path:
            tree = tree[key]
        tree[last] = value
    return RuntimeRecord.model_validate_json(json.dumps(doc))


def test_the_operators_seal_verifies_the_copy_as_the_api_server_gives_it_back() -> None:
    # The API server keeps numbers as Go does: 80.0 is written back as 80 (apimachinery util/json: a float64 with
    # no fraction marshals without one). The copy read back is the same typed copy, so the seal holds.
    wire = json.loads(RECORD.model_dump_json(by_alias=True))
    for instance in wire["spec"]["instanceTypes"]:
        for key, value in instance.items():
            if isinstance(value, float) and value.is_integer():
                instance[key] = int(value)
    back = RuntimeRecord.model_validate_json(json.dumps(wire))
    assert broken_seal(KEY, RUN, 3, back, SEALED) is None


MISMATCHES = [
    ("another key", bytes(32), RUN, 3, RECORD),
    ("another run of the same name (a new uid)", KEY, RunRef("team-a", "grpo-x", "other-uid"), 3, RECORD),
    ("a run of another name", KEY, RunRef("team-a", "grpo-y", RUN.uid), 3, RECORD),
    ("a run in another namespace", KEY, RunRef("team-b", "grpo-x", RUN.uid), 3, RECORD),
    ("another observedGeneration", KEY, RUN, 4, RECORD),
    ("no locks", KEY, RUN, 3, _changed(locks={})),
    ("no node limit", KEY, RUN, 3, _changed(locks__maxNodesPerRun=4096)),
    ("no image prefixes", KEY, RUN, 3, _changed(locks__imagePrefixes=[])),
    ("another default image", KEY, RUN, 3, _changed(defaults__trainerImage="docker.io/me/trainer:1")),
    ("another name", KEY, RUN, 3, RECORD.model_copy(update={"name": "permissive"})),
    ("another resourceVersion", KEY, RUN, 3, RECORD.model_copy(update={"resource_version": "42"})),
]


@pytest.mark.parametrize(("what", "key", "run", "generation", "record"), MISMATCHES, ids=[row[0] for row in MISMATCHES])
def test_a_seal_verifies_nothing_but_what_it_was_made_for(
    what: str, key: bytes, run: RunRef, generation: int, record: RuntimeRecord
) -> None:
    broken = broken_seal(key, run, generation, record, SEALED)
    assert broken is not None, what
    assert broken.startswith("does not match status.runtimeDigest") and SEALED[:20] in broken


@pytest.mark.parametrize("digest", [None, ""])
def test_a_copy_without_a_digest_says_it_has_none(digest: str | None) -> None:
    broken = broken_seal(KEY, RUN, 3, RECORD, digest)
    assert broken is not None and broken.startswith("has no status.runtimeDigest (someone removed it")


def test_a_seal_is_the_scheme_and_64_hex_digits_and_the_same_every_time() -> None:
    scheme, _, hexdigest = SEALED.partition(":")
    assert scheme == "hmac-sha256" and len(hexdigest) == 64 and int(hexdigest, 16) >= 0
    assert seal(KEY, RUN, 3, RECORD.model_copy(deep=True)) == SEALED  # no status write from a new seal alone
