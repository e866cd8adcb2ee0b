"""A run resolved against a GRPORuntime: defaults filled in, locks refused naming both objects, the node type's
GPU and host memory in the plan, and a type without a fabric single-node only."""

from __future__ import annotations

import copy
import json
from typing import Any

import yaml
from grpo_operator.api.runtime import RuntimeRecord
from grpo_operator.planning.documents import parse_run, parse_runtime
from grpo_operator.planning.instances import DEFAULT_RUNTIME, DEFAULT_RUNTIME_DOCUMENT
from grpo_operator.planning.runtime import record_of, runtime_from_record
from grpo_operator.planning.validation import check, errors

from tests.support.builders import EXAMPLES, REPO, base, merge
from tests.support.runtimes import short_run

RUNTIMES = EXAMPLES / "runtimes"


def runtime(name: str, patch: dict[str, Any] | None = None) -> Any:
    doc = merge(yaml.safe_load((RUNTIMES / f"{name}.yaml").read_text()), patch or {})
    parsed, problems = parse_runtime(doc)
    assert parsed is not None, problems
    return parsed


def test_a_short_run_gets_image_storage_queue_and_instance_type_from_its_runtime() -> None:
    run, problems = parse_run(short_run(), runtime("h100-infiniband"))
    assert run is not None, problems
    assert run.spec.image.startswith("registry.example.com/ml/grpo-trainer@sha256:")
    assert (run.spec.storage.claim_name, run.spec.storage.mount_path) == ("shared-rwx", "/shared")
    assert run.spec.storage.save_interval == 10
    assert run.spec.scheduling.queue_name == "gpu-queue"
    assert run.spec.topology.instance_type == "h100-ib"


def test_what_a_run_sets_wins_over_the_runtime_default() -> None:
    run, problems = parse_run(short_run({"storage": {"saveInterval": 3}}), runtime("h100-infiniband"))
    assert run is not None, problems
    assert run.spec.storage.save_interval == 3


def test_a_run_overriding_a_locked_field_is_refused_naming_both_objects_the_field_the_value_and_the_fix() -> None:
    run, problems = parse_run(short_run({"scheduling": {"queueName": "my-queue"}}), runtime("h100-infiniband"))
    assert run is None
    [problem] = problems
    assert problem.path == "spec.scheduling.queueName"
    for part in ("GRPORun default/quickstart-ib", "GRPORuntime h100-ib", "'my-queue'", "locks.fields", "remove"):
        assert part in problem.message, problem.message


def test_an_image_outside_the_runtimes_registries_and_too_many_nodes_are_refused() -> None:
    doc = short_run({"image": "docker.io/me/trainer:1", "topology": {"actor": {"nodes": 17}}})
    run, problems = parse_run(doc, runtime("h100-infiniband"))
    assert run is None
    messages = {p.path: p.message for p in problems}
    assert "locks.imagePrefixes: registry.example.com/ml/" in messages["spec.image"]
    assert "17 worker nodes" in messages["spec.topology.actor.nodes"]
    assert "at most 16" in messages["spec.topology.actor.nodes"]


def test_an_instance_type_the_runtime_lacks_is_refused_with_the_types_it_offers() -> None:
    run, problems = parse_run(short_run({"topology": {"instanceType": "p5en.48xlarge"}}), runtime("h100-infiniband"))
    assert run is None
    assert problems[0].path == "spec.topology.instanceType"
    assert "GRPORuntime h100-ib" in problems[0].message and "name one of h100-ib" in problems[0].message


def test_a_multi_node_run_on_a_type_without_fabric_is_refused() -> None:
    rt = runtime("single-node")
    doc = short_run({"topology": {"actor": {"nodes": 2, "gpusPerNode": 2}}})
    del doc["spec"]["runtimeRef"]
    run, problems = parse_run(doc, rt)
    assert run is not None, problems
    found = errors(check(run).problems)
    assert any("no fabric between nodes" in p.message and "single-node" in p.message for p in found), found
    one, _ = parse_run(merge(doc, {"spec": {"topology": {"actor": {"nodes": 1}}}}), rt)
    assert one is not None
    assert not any("fabric" in p.message for p in check(one).problems)


def test_a_48_gib_gpu_type_refuses_what_an_h200_accepts_with_the_numbers() -> None:
    doc = base()
    h200, _ = parse_run(doc)
    assert h200 is not None and check(h200).valid
    small = copy.deepcopy(DEFAULT_RUNTIME_DOCUMENT)
    small["spec"]["instanceTypes"][1] |= {"gpuMemoryGiB": 48.0, "gpuModel": "L40S", "memoryGiB": 512}
    rt, problems = parse_runtime(small)
    assert rt is not None, problems
    run, _ = parse_run(doc, rt)
    assert run is not None
    result = check(run)
    assert not result.valid
    assert result.plan is not None and result.plan.gpu_gib == 48.0
    memory = [p.message for p in errors(result.problems) if "GiB" in p.message]
    assert any("L40S of p5en.48xlarge (48 GiB)" in m for m in memory), memory


def test_without_a_runtime_a_run_resolves_against_the_built_in_aws_types() -> None:
    run, problems = parse_run(base())
    assert run is not None, problems
    assert run.spec.runtime is not None and run.spec.runtime.metadata.name == "default"
    with_default, _ = parse_run(base(), DEFAULT_RUNTIME)
    assert with_default is not None
    assert check(run).plan == check(with_default).plan


def test_the_aws_runtime_example_and_the_charts_default_runtime_are_the_built_in_table() -> None:
    for path in (RUNTIMES / "aws.yaml", REPO / "charts" / "grpo-operator" / "runtimes" / "default.yaml"):
        assert yaml.safe_load(path.read_text()) == DEFAULT_RUNTIME_DOCUMENT, f"{path} is stale: run make crds"
    assert (REPO / "charts" / "grpo-operator" / "crds" / "grporuntimes.grpo.dev.yaml").exists()


def test_a_run_resolved_against_its_recorded_runtime_ignores_later_edits_of_the_live_one() -> None:
    live = runtime("h100-infiniband")
    live.metadata.resource_version = "41"
    record = record_of(live)
    stored = json.loads(record.model_dump_json(by_alias=True, exclude_none=True))  # as status.runtime holds it
    assert stored["name"] == "h100-ib" and stored["resourceVersion"] == "41"
    edited = runtime("h100-infiniband", {"spec": {"defaults": {"trainerImage": "registry.example.com/ml/new:2"}}})
    before, _ = parse_run(short_run(), runtime_from_record(RuntimeRecord.model_validate_json(json.dumps(stored))))
    after, _ = parse_run(short_run(), edited)
    assert before is not None and after is not None
    assert before.spec.image.endswith("@sha256:4f5c2d0e8a1b3c6d9e7f0a2b4c6d8e0f1a3b5c7d9e1f3a5b7c9d1e3f5a7b9c1d")
    assert after.spec.image == "registry.example.com/ml/new:2"


def test_a_checkpoint_dir_off_the_runtimes_mount_is_refused_after_resolution() -> None:
    run, problems = parse_run(short_run({"storage": {"checkpointDir": "/fsx/ckpt"}}), runtime("h100-infiniband"))
    assert run is not None, problems
    found = {p.path: p.message for p in errors(check(run).problems)}
    assert "spec.storage.checkpointDir" in found and "mountPath /shared" in found["spec.storage.checkpointDir"]


def test_a_run_without_image_on_a_runtime_without_one_names_the_runtime_default_that_would_supply_it() -> None:
    doc = short_run()
    del doc["spec"]["runtimeRef"]
    run, problems = parse_run(doc)
    assert run is None
    messages = {p.path: p.message for p in problems}
    assert "GRPORuntime default has no defaults.trainerImage" in messages["spec.image"]
    assert "defaults.storage.claimName" in messages["spec.storage"]


def test_a_type_with_little_host_memory_refuses_the_pinned_memory_with_the_numbers() -> None:
    small = copy.deepcopy(DEFAULT_RUNTIME_DOCUMENT)
    small["spec"]["instanceTypes"][1] |= {"memoryGiB": 64}
    rt, problems = parse_runtime(small)
    assert rt is not None, problems
    run, _ = parse_run(base(), rt)
    assert run is not None
    result = check(run)
    assert result.plan is not None and result.plan.host_capacity_gib == 57.6
    host = [p.message for p in errors(result.problems) if "pinned host memory" in p.message]
    assert host and "pod gets 58 GiB (90% of its 64 GiB)" in host[0], host
