"""The seed's rendering defects cannot occur: each test names the defect it rules out.

- head advertised CPUs, so CUDA-importing control actors landed on a head without libcuda
- workers asked for part of the node's EFA devices (partial request breaks point-to-point NCCL)
- the job driver landed on the head unless --entrypoint-resources was passed by hand
- a Service named `prometheus` injected PROMETHEUS_PORT=tcp://... and crashed miles's argument parsing
- --runtime-env-json built by string interpolation broke on quotes and backslashes in paths
- the HF token must never reach a Ray runtime env or a log
- envsubst rendered undefined variables as empty strings (`image: ""`)
- the MoE combined geometry produced degenerate text without the FlashInfer fusion disabled
- uppercase `--sglang-log-level WARN` made SGLang's router never bind
"""

from __future__ import annotations

import json
import shlex

from tests.support.builders import example, kind, pod_specs, rendered


def test_the_head_advertises_no_cpus_or_gpus_so_no_actor_can_land_there() -> None:
    cluster = kind(rendered(example("qwen3-4b-colocated")), "RayCluster")
    head = cluster["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0"
    assert head["rayStartParams"]["num-gpus"] == "0"
    resources = head["template"]["spec"]["containers"][0]["resources"]
    assert "nvidia.com/gpu" not in resources["requests"] and "nvidia.com/gpu" not in resources["limits"]


def test_the_head_goes_to_the_cpu_pool_named_by_head_node_selector() -> None:
    doc = example(
        "qwen3-4b-colocated", {"scheduling": {"headNodeSelector": {"pool": "cpu"}, "gpuNodeSelector": {"pool": "gpu"}}}
    )
    cluster = kind(rendered(doc), "RayCluster")
    assert cluster["spec"]["headGroupSpec"]["template"]["spec"]["nodeSelector"] == {"pool": "cpu"}
    worker_selector = cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]["nodeSelector"]
    assert worker_selector == {"pool": "gpu", "node.kubernetes.io/instance-type": "p5en.48xlarge"}


def test_multi_node_workers_request_every_efa_device_of_the_node() -> None:
    result = rendered(example("qwen3-30b-a3b-pure-ep"))
    worker = kind(result, "RayCluster")["spec"]["workerGroupSpecs"][0]
    limits = worker["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["vpc.amazonaws.com/efa"] == "15"  # p5en.48xlarge allocatable
    assert worker["replicas"] == worker["minReplicas"] == worker["maxReplicas"] == 2


def test_single_node_workers_do_not_need_the_efa_device_plugin() -> None:
    worker = kind(rendered(example("qwen3-4b-colocated")), "RayCluster")["spec"]["workerGroupSpecs"][0]
    container = worker["template"]["spec"]["containers"][0]
    assert "vpc.amazonaws.com/efa" not in container["resources"]["limits"]
    assert "FI_PROVIDER" not in {e["name"] for e in container["env"]}


def test_the_job_driver_is_pinned_to_a_gpu_worker() -> None:
    result = rendered(example("qwen3-4b-colocated"))
    assert result.job.entrypoint_resources == {"gpu_node": 0.001}
    cluster = kind(result, "RayCluster")
    worker_resources = json.loads(cluster["spec"]["workerGroupSpecs"][0]["rayStartParams"]["resources"].strip("'"))
    assert worker_resources == {"gpu_node": 1.0}
    assert "resources" not in cluster["spec"]["headGroupSpec"]["rayStartParams"]


def test_no_pod_gets_service_links_injected() -> None:
    specs = pod_specs(rendered(example("qwen3-4b-disaggregated")))
    assert len(specs) == 3  # reward service, head, workers
    assert all(spec["enableServiceLinks"] is False for spec in specs)


def test_prometheus_port_is_explicit_in_argv_and_env() -> None:
    job = rendered(example("quickstart")).job
    argv = list(job.miles_argv)
    assert argv[argv.index("--prometheus-port") + 1].isdigit()
    assert job.runtime_env["env_vars"]["PROMETHEUS_PORT"].isdigit()


def test_paths_with_quotes_and_backslashes_survive_the_entrypoint_and_runtime_env() -> None:
    odd = '/fsx/odd dir/it\'s "quoted" $HOME \\ back'
    doc = example("quickstart", {"model": {"hfCheckpoint": odd}, "storage": {"tensorboardDir": odd + "/tb"}})
    job = rendered(doc).job
    assert shlex.split(job.entrypoint) == list(job.entrypoint_argv)
    assert odd in job.miles_argv
    assert json.loads(json.dumps(job.runtime_env))["env_vars"]["TENSORBOARD_DIR"] == odd + "/tb"


def test_the_hf_token_reaches_pods_only_by_secret_reference() -> None:
    result = rendered(example("quickstart"))  # hfTokenSecret: hf-token
    for spec in pod_specs(result):
        for container in spec["containers"]:
            tokens = [e for e in container["env"] if e["name"] == "HF_TOKEN"]
            if tokens:
                assert tokens == [
                    {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN"}}}
                ]
    assert "HF_TOKEN" not in json.dumps(result.job.as_dict())
    no_secret = rendered(example("qwen3-4b-colocated"))
    assert "HF_TOKEN" not in json.dumps(no_secret.children)


def test_no_empty_string_reaches_a_manifest() -> None:
    def strings(node):  # type: ignore[no-untyped-def]
        if isinstance(node, dict):
            for value in node.values():
                yield from strings(value)
        elif isinstance(node, list):
            for value in node:
                yield from strings(value)
        elif isinstance(node, str):
            yield node

    for name in ("quickstart", "qwen3-4b-disaggregated", "qwen3-30b-a3b-combined"):
        assert "" not in list(strings(rendered(example(name)).children)), name


def test_the_flashinfer_fusion_is_disabled_exactly_for_the_combined_moe_geometry() -> None:
    flag = "--sglang-enforce-disable-flashinfer-allreduce-fusion"
    assert flag in rendered(example("qwen3-30b-a3b-combined")).job.miles_argv
    for name in ("qwen3-30b-a3b-pure-ep", "qwen3-30b-a3b-pure-tp", "qwen3-4b-colocated"):
        assert flag not in rendered(example(name)).job.miles_argv, name


def test_sglang_log_level_is_lowercase() -> None:
    argv = list(rendered(example("quickstart")).job.miles_argv)
    assert argv[argv.index("--sglang-log-level") + 1] == "warning"


def test_cuda_device_max_connections_is_set_only_with_tensor_or_context_parallelism() -> None:
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in rendered(example("qwen3-4b-colocated")).job.runtime_env["env_vars"]
    assert rendered(example("glm-z1-9b-tp2")).job.runtime_env["env_vars"]["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"


def test_extra_args_come_last() -> None:
    job = rendered(example("quickstart", {"extraArgs": ["--rollout-top-p", "0.95"]})).job
    assert list(job.miles_argv[-2:]) == ["--rollout-top-p", "0.95"]


def test_the_reward_service_url_is_derived_from_its_service() -> None:
    result = rendered(example("qwen3-4b-disaggregated", namespace="team-a"))
    argv = list(result.job.miles_argv)
    service = kind(result, "Service")
    assert argv[argv.index("--rm-type") + 1] == "remote_rm"
    assert (
        argv[argv.index("--rm-url") + 1] == f"http://{service['metadata']['name']}.team-a.svc.cluster.local:8000/score"
    )
    deployment = kind(result, "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert kind(result, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1


def test_the_run_config_holds_exactly_the_argv_the_job_runs() -> None:
    result = rendered(example("qwen3-4b-colocated"))
    config = json.loads(kind(result, "ConfigMap")["data"]["run-config.json"])
    assert config["argv"] == list(result.job.miles_argv)
    assert list(result.job.entrypoint_argv[-len(result.job.miles_argv) :]) == config["argv"]
    assert config["preflight"]["gpus"] == 8


def test_children_are_owned_by_the_run_when_it_has_a_uid() -> None:
    result = rendered(example("quickstart", uid="1234-uid", generation=3))
    for child in result.children:
        assert child["metadata"]["ownerReferences"][0]["uid"] == "1234-uid"
    assert result.job.submission_id == "grpo-quickstart-1234-uid-g3"
