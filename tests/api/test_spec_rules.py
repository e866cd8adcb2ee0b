"""The rules the Python side of the API holds, as `grpo validate` and the operator report them: node selector
keys, DNS labels, image references, paths under the mount, the parallel sizes the rules read, and the strict
types the API server also enforces."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.builders import base, check, merge


def problems(patch: dict[str, Any]) -> list[str]:
    _, found = check(merge(base(), patch))
    return [str(p) for p in found]


def accepted(patch: dict[str, Any]) -> bool:
    run, found = check(merge(base(), patch))
    return run is not None and not [p for p in found if p.severity.name == "ERROR"]


@pytest.mark.parametrize(
    "key",
    ["topology.kubernetes.io/zone", "gpu", "a" * 253 + "/zone", "example.com/" + "n" * 63],
    ids=["a prefixed key", "a bare name", "a 253-character prefix", "a 63-character name"],
)
def test_a_node_selector_key_the_api_server_takes_is_accepted(key: str) -> None:
    assert accepted({"spec": {"scheduling": {"gpuNodeSelector": {key: "yes"}}}}), key


@pytest.mark.parametrize(
    "key",
    ["bad key", "-gpu", "a" * 254 + "/zone", "example.com/" + "n" * 64, "Example.com/x"],
    ids=["a space", "a leading dash", "a 254-character prefix", "a 64-character name", "an upper-case prefix"],
)
def test_a_node_selector_key_the_api_server_refuses_is_refused_naming_the_key_and_the_rule(key: str) -> None:
    found = problems({"spec": {"scheduling": {"gpuNodeSelector": {key: "yes"}}}})
    assert any("gpuNodeSelector" in p and "is not a label key" in p for p in found), found


def test_a_one_character_namespace_is_a_dns_label_and_a_64_character_one_is_not() -> None:
    assert accepted({"metadata": {"namespace": "a"}})
    assert accepted({"metadata": {"namespace": "a" * 63}})
    found = problems({"metadata": {"namespace": "a" * 64}})
    assert any(p.startswith("metadata.namespace") for p in found), found


def test_an_image_the_kubelet_cannot_parse_is_refused_with_the_rule_in_words() -> None:
    found = problems({"spec": {"image": "Registry.example/Trainer:v1"}})
    assert any(p.startswith("spec.image") and "an image reference the kubelet can parse" in p for p in found), found


@pytest.mark.parametrize("mount", ["/mnt/shared", "/mnt/shared/"])
def test_a_checkpoint_dir_counts_as_under_the_mount_only_below_it_with_or_without_a_trailing_slash(mount: str) -> None:
    assert accepted({"spec": {"storage": {"mountPath": mount, "checkpointDir": "/mnt/shared/ckpt"}}})
    found = problems({"spec": {"storage": {"mountPath": mount, "checkpointDir": "/mnt/sharedckpt"}}})
    assert any(p.startswith("spec.storage.checkpointDir") and "not under storage.mountPath" in p for p in found)


@pytest.mark.parametrize(
    ("nodes", "parallelism", "prompts", "samples", "refused"),
    [
        # 16 actor GPUs / (2 x 2 x 1) = data-parallel 4: a global batch of 9 x 2 = 18 does not divide, 36 does.
        (2, {"tensor": 2, "pipeline": 2}, 9, 2, True),
        (2, {"tensor": 2, "pipeline": 2}, 9, 4, False),
        # 16 / (4 x 1 x 2) = 2: 9 x 2 = 18 divides, 9 x 3 = 27 does not.
        (2, {"tensor": 4, "context": 2}, 9, 2, False),
        (2, {"tensor": 4, "context": 2}, 9, 3, True),
        # 8 / 8 = 1: any global batch divides.
        (1, {"tensor": 8}, 9, 3, False),
    ],
    ids=[
        "dp 4, batch 18 refused",
        "dp 4, batch 36 passes",
        "dp 2, batch 18 passes",
        "dp 2, batch 27 refused",
        "dp 1, any batch passes",
    ],
)
def test_the_global_batch_must_divide_by_the_data_parallel_size_of_the_actor(
    nodes: int, parallelism: dict[str, int], prompts: int, samples: int, refused: bool
) -> None:
    patch = {
        "spec": {
            "topology": {"actor": {"nodes": nodes, "gpusPerNode": 8}, "parallelism": parallelism},
            "rollout": {"batchSize": prompts, "samplesPerPrompt": samples},
            "training": {"globalBatchSize": prompts * samples},
        }
    }
    found = [p for p in problems(patch) if "data-parallel size" in p]
    assert bool(found) is refused, found


def test_a_number_written_as_a_string_is_refused_as_the_api_server_refuses_it() -> None:
    found = problems({"spec": {"rollout": {"numRollout": "100"}}})
    assert any(p.startswith("spec.rollout.numRollout") for p in found), found
