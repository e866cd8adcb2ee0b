"""Every configuration defect class of the seed review is rejected before a GPU is spent.

Seed defect classes (../shared/seed-review.txt, ../shared/research/seed-testcase.md §2, §6) and the test
that shows each one cannot recur:
- validation differs per recipe (`ACTOR_NUM_NODES=two` accepted by the 30B recipe): one typed schema,
  test_a_word_where_a_number_belongs_is_rejected_naming_the_field
- `08` read as octal by bash, check skipped: test_a_leading_zero_number_is_rejected_not_reinterpreted
- `EP_SIZE=0` dies with a raw bash division by zero: test_zero_expert_parallelism_is_a_bound_error
- `COLOCATE` spellings (`True`, `1`, `yes`): test_placement_accepts_only_its_two_spellings
- colocated actor 16 vs rollout 8 accepted: test_colocated_rollout_gpus_must_equal_actor_gpus
- `WORKER_REPLICAS` derived above the override block: test_worker_replicas_follow_the_final_topology
- `CLUSTER_GPUS` ceiling never set, so it never fired: test_cluster_size_is_derived_not_declared
- GRPO batch identity never checked: test_batch_identity_is_enforced
- rollout GPUs not a multiple of the engine size sit idle: test_idle_rollout_gpus_are_refused
- Qwen2.5-72B fails with OOM after an 18 GB image pull: test_qwen25_72b_on_two_p5en_is_rejected_for_memory
- SGLang memFraction 0.85 OOM colocated: test_colocated_mem_fraction_085_is_rejected_with_the_highest_safe_value
- 30B MoE on 8 GPUs without the distributed optimizer OOMs: tests/planning/test_plan_memory.py
- `RM_TYPE=remote_rm` without `RM_URL`: test_remote_reward_needs_its_service_block
- `REWARD_BACKEND` typo silently selects a large classifier: test_reward_backend_typo_is_rejected
- `EXTRA_TRAIN_ARGS` overriding managed flags (e.g. `--sglang-log-level WARN`): test_managed_flags_in_extra_args_name_the_spec_field
- partial EFA request breaks point-to-point traffic: test_efa_request_is_the_full_node_count_by_default
- undefined variables render as `image: ""`: test_an_empty_image_is_rejected
- `CHECKPOINT_DIR` shared between runs resumes the wrong run: test_each_run_gets_its_own_checkpoint_directory
- reused image tags give mixed builds: test_an_unpinned_image_is_warned_about
"""

from __future__ import annotations

import pytest
from grpo_operator.planning.plan import make_plan
from grpo_operator.planning.validation import Severity

from tests.support.builders import CEL_CASES, EXAMPLES, Case, base, check, merge


def paths(problems) -> list[str]:  # type: ignore[no-untyped-def]
    return [p.path for p in problems]


@pytest.mark.parametrize("case", CEL_CASES, ids=lambda c: c.id)
def test_each_bad_input_is_rejected_naming_its_field(case: Case) -> None:
    _run, problems = check(case.manifest())
    errors = [p for p in problems if p.severity is Severity.ERROR]
    assert case.field in paths(errors), [str(p) for p in problems]


def test_a_word_where_a_number_belongs_is_rejected_naming_the_field(spec_with) -> None:  # type: ignore[no-untyped-def]
    _, problems = spec_with({"topology": {"actor": {"nodes": "two"}}})
    assert [str(p) for p in problems] == [
        'spec.topology.actor.nodes: "two" is invalid: Input should be a valid integer; write a whole number without quotes'
    ]


def test_a_leading_zero_number_is_rejected_not_reinterpreted() -> None:
    from grpo_operator.cli import check_text

    text = (EXAMPLES / "qwen3-4b-colocated.yaml").read_text().replace("nodes: 1,", "nodes: 08,")
    checked, _ = check_text(text)
    assert not checked[0].valid
    assert "spec.topology.actor.nodes" in [p.path for p in checked[0].problems]


def test_zero_expert_parallelism_is_a_bound_error(spec_with) -> None:  # type: ignore[no-untyped-def]
    _, problems = spec_with({"topology": {"parallelism": {"expert": 0}}})
    assert problems[0].path == "spec.topology.parallelism.expert"
    assert "greater than or equal to 1" in problems[0].message


@pytest.mark.parametrize("spelling", ["True", "true", "1", "yes", "colocated", True])
def test_placement_accepts_only_its_two_spellings(spec_with, spelling) -> None:  # type: ignore[no-untyped-def]
    _, problems = spec_with({"topology": {"placement": spelling}})
    assert paths(problems) == ["spec.topology.placement"]
    assert "'Colocated' or 'Disaggregated'" in problems[0].message or "valid string" in problems[0].message


def test_colocated_rollout_gpus_must_equal_actor_gpus(spec_with) -> None:  # type: ignore[no-untyped-def]
    _, problems = spec_with({"topology": {"rollout": {"gpus": 16}}})
    assert str(problems[0]) == (
        "spec.topology.rollout.gpus: 16 must equal actor GPUs (1 nodes x 8 = 8) when placement is Colocated; "
        "remove rollout.gpus or set it to that number"
    )


def test_worker_replicas_follow_the_final_topology(spec_with) -> None:  # type: ignore[no-untyped-def]
    run, problems = spec_with({"topology": {"actor": {"nodes": 2}}})
    assert not problems and run is not None
    assert make_plan(run).worker_replicas == 2
    run, problems = spec_with(
        {"topology": {"placement": "Disaggregated", "actor": {"nodes": 2}, "rollout": {"gpus": 16}}}
    )
    assert not problems and run is not None
    assert make_plan(run).worker_replicas == 4


def test_cluster_size_is_derived_not_declared() -> None:
    for path in sorted(EXAMPLES.glob("*.yaml")):
        run, _ = check(__import__("yaml").safe_load(path.read_text()))
        assert run is not None, path
        plan = make_plan(run)
        needed = plan.actor_gpus + (plan.rollout_gpus if plan.placement == "Disaggregated" else 0)
        assert plan.total_gpus >= needed, path.name
        assert plan.total_gpus == plan.worker_replicas * plan.gpus_per_node


def test_batch_identity_is_enforced(spec_with) -> None:  # type: ignore[no-untyped-def]
    _, problems = spec_with({"training": {"globalBatchSize": 64}})
    assert paths(problems) == ["spec.training.globalBatchSize"]
    assert "16 x 8 = 128" in problems[0].message and "64 x 1 = 64" in problems[0].message


def test_idle_rollout_gpus_are_refused(spec_with) -> None:  # type: ignore[no-untyped-def]
    _, problems = spec_with({"topology": {"placement": "Disaggregated", "rollout": {"gpus": 6, "gpusPerEngine": 4}}})
    assert "spec.topology.rollout.gpusPerEngine" in paths(problems)


def test_qwen25_72b_on_two_p5en_is_rejected_for_memory() -> None:
    from grpo_operator.cli import main

    assert main(["validate", "-f", str(EXAMPLES / "qwen25-72b-disaggregated.yaml")]) == 1
    _run, problems = check(__import__("yaml").safe_load((EXAMPLES / "qwen25-72b-disaggregated.yaml").read_text()))
    memory = [p for p in problems if p.path == "spec.topology"]
    assert len(memory) == 1 and "GiB per GPU" in memory[0].message and "140.4 GiB" in memory[0].message


def test_colocated_mem_fraction_085_is_rejected_with_the_highest_safe_value(spec_with) -> None:  # type: ignore[no-untyped-def]
    _, problems = spec_with({"topology": {"rollout": {"memFraction": 0.85}}})
    assert paths(problems) == ["spec.topology.rollout.memFraction"]
    assert "set it to at most 0.84" in problems[0].message
    _, problems = spec_with({"topology": {"rollout": {"memFraction": 0.8}}})
    assert problems == []


def test_remote_reward_needs_its_service_block(spec_with) -> None:  # type: ignore[no-untyped-def]
    _, problems = spec_with({"reward": {"type": "remote"}})
    assert paths(problems) == ["spec.reward.remote"]
    run, problems = spec_with({"reward": {"type": "remote", "remote": {}}})
    assert problems == [] and run is not None


def test_reward_backend_typo_is_rejected(spec_with) -> None:  # type: ignore[no-untyped-def]
    _, problems = spec_with({"reward": {"type": "remote", "remote": {"backend": "reward-model"}}})
    assert paths(problems) == ["spec.reward.remote.backend"]
    assert "'math_verify' or 'reward_model'" in problems[0].message


def test_managed_flags_in_extra_args_name_the_spec_field(spec_with) -> None:  # type: ignore[no-untyped-def]
    _, problems = spec_with(
        {"extraArgs": ["--use-kl-loss", "--rollout-top-p", "0.9", "--tensor-model-parallel-size=2"]}
    )
    assert [str(p) for p in problems] == [
        "spec.extraArgs[0]: --use-kl-loss is managed by the operator; set spec.training.klLossCoef instead",
        "spec.extraArgs[3]: --tensor-model-parallel-size=2 is managed by the operator; set "
        "spec.topology.parallelism.tensor instead",
    ]


def test_efa_request_is_the_full_node_count_by_default(spec_with) -> None:  # type: ignore[no-untyped-def]
    run, _ = spec_with({"topology": {"actor": {"nodes": 2}}})
    assert run is not None and make_plan(run).efa_per_node == 15  # p5en.48xlarge: all allocatable devices
    run, problems = check(merge(base(), {"spec": {"topology": {"actor": {"nodes": 2}, "efaPerNode": 8}}}))
    assert [p.severity for p in problems if p.path == "spec.topology.efaPerNode"] == [Severity.WARNING]


def test_an_empty_image_is_rejected(spec_with) -> None:  # type: ignore[no-untyped-def]
    _, problems = spec_with({"image": ""})
    assert paths(problems) == ["spec.image"]


def test_each_run_gets_its_own_checkpoint_directory() -> None:
    first, _ = check(base())
    other = base()
    other["metadata"]["name"] = "another-run"
    second, _ = check(other)
    assert first is not None and second is not None
    assert make_plan(first).checkpoint_dir != make_plan(second).checkpoint_dir


def test_an_unpinned_image_is_warned_about(spec_with) -> None:  # type: ignore[no-untyped-def]
    _run, problems = check(merge(base(), {"spec": {"image": "miles:latest"}}))
    assert [(p.path, p.severity) for p in problems] == [("spec.image", Severity.WARNING)]


def test_all_problems_are_reported_at_once(spec_with) -> None:  # type: ignore[no-untyped-def]
    _, problems = spec_with({"rollout": {"batchSize": -1, "numRollout": "x"}, "topology": {"actor": {"nodes": 0}}})
    assert set(paths(problems)) == {"spec.rollout.batchSize", "spec.rollout.numRollout", "spec.topology.actor.nodes"}
