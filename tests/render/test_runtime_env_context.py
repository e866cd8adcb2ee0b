"""Megatron needs CUDA_DEVICE_MAX_CONNECTIONS=1 to overlap its tensor- or context-parallel communication; a run
with context parallelism alone gets it too (the rule is "tensor > 1 or context > 1")."""

from __future__ import annotations

from tests.support.builders import example, rendered


def test_context_parallelism_of_two_alone_sets_cuda_device_max_connections() -> None:
    doc = example("glm-z1-9b-tp2", {"topology": {"parallelism": {"tensor": 1, "context": 2}}})
    assert rendered(doc).job.runtime_env["env_vars"]["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"


def test_tensor_parallelism_of_two_alone_sets_it_and_neither_leaves_it_unset() -> None:
    tensor = example("glm-z1-9b-tp2", {"topology": {"parallelism": {"tensor": 2, "context": 1}}})
    assert rendered(tensor).job.runtime_env["env_vars"]["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    neither = example("glm-z1-9b-tp2", {"topology": {"parallelism": {"tensor": 1, "context": 1}}})
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in rendered(neither).job.runtime_env["env_vars"]
