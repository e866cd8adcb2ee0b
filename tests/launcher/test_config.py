"""Parsing the run config the operator renders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from grpo_launcher.config import ConfigError, load_run_config, parse_run_config

from tests.support.launcher import base_config, write_config


def test_a_rendered_config_parses_and_tolerates_new_keys_in_spec_and_plan(tmp_path: Path) -> None:
    config = base_config(
        tmp_path, gpus=8, minFreeGpuMemoryGiB=98.0, fabric={"type": "efa", "devices": 16}, metricsPort=9465
    )
    config["argv"] = ["python3", "/root/miles/train.py", "--hf-checkpoint", "/fsx/m"]
    parsed = load_run_config(write_config(tmp_path, config))
    assert parsed.run.name == "qwen3-4b"
    assert parsed.preflight.gpus == 8
    assert parsed.preflight.min_free_gpu_memory_gib == 98.0
    assert (parsed.preflight.fabric.type, parsed.preflight.fabric.devices) == ("efa", 16)
    assert parsed.preflight.metrics_port == 9465
    assert parsed.argv == ["python3", "/root/miles/train.py", "--hf-checkpoint", "/fsx/m"]
    assert parsed.spec["somethingNew"] == {"x": 1}
    assert parsed.plan.gpus_per_node == 8
    assert parsed.env == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}


def test_the_metrics_port_defaults_to_9465(tmp_path: Path) -> None:
    config = base_config(tmp_path)
    del config["preflight"]["metricsPort"]
    assert parse_run_config(json.dumps(config)).preflight.metrics_port == 9465


def test_a_missing_preflight_field_is_named_with_the_fix(tmp_path: Path) -> None:
    config = base_config(tmp_path)
    del config["preflight"]["shmMinGiB"]
    with pytest.raises(ConfigError) as err:
        parse_run_config(json.dumps(config), "run-config.json")
    message = str(err.value)
    assert "preflight.shmMinGiB: absent" in message
    assert "re-render" in message


def test_an_unknown_preflight_key_is_refused_with_its_name(tmp_path: Path) -> None:
    config = base_config(tmp_path)
    config["preflight"]["gpuz"] = 8
    with pytest.raises(ConfigError, match=r"preflight\.gpuz: 8: Extra inputs"):
        parse_run_config(json.dumps(config))


def test_a_negative_gpu_count_names_field_value_and_rule(tmp_path: Path) -> None:
    config = base_config(tmp_path, gpus=-1)
    with pytest.raises(ConfigError, match=r"preflight\.gpus: -1: Input should be greater than or equal to 0"):
        parse_run_config(json.dumps(config))


def test_an_empty_argv_list_is_refused(tmp_path: Path) -> None:
    config = base_config(tmp_path)
    config["argv"] = []
    with pytest.raises(ConfigError, match=r"argv: \[\]"):
        parse_run_config(json.dumps(config))


def test_text_that_is_not_json_reports_line_and_column() -> None:
    with pytest.raises(ConfigError, match=r"is not JSON: line 2 column 1"):
        parse_run_config('{"apiVersion":\n}', "cfg.json")


def test_a_missing_file_says_which_configmap_key_to_mount(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"mount the ConfigMap key run-config.json"):
        load_run_config(tmp_path / "absent.json")


def test_a_config_of_the_operator_before_fabric_became_an_object_still_reads(tmp_path: Path) -> None:
    # One release of overlap: an older operator wrote the type as a string beside efaDevices and infinibandDevices.
    old = base_config(tmp_path, fabric="infiniband", efaDevices=0, infinibandDevices=8)
    assert parse_run_config(json.dumps(old)).preflight.fabric.model_dump() == {"type": "infiniband", "devices": 8}
    oldest = {k: v for k, v in base_config(tmp_path, efaDevices=16).items()}
    del oldest["preflight"]["fabric"]
    assert parse_run_config(json.dumps(oldest)).preflight.fabric.model_dump() == {"type": "efa", "devices": 16}
