"""What `grpo render` prints: ordinary strings plain, keys in the order a manifest is written, the run config as a
block a person can read line by line. (Strings kubectl would read as another type are quoted: the parametrized
round trip in tests/cli/test_reads_what_kubectl_sends.py, which the render mutation group runs.)"""

from __future__ import annotations

from grpo_operator.cli.yamldecode import decode_all
from grpo_operator.render.yamlout import dump_all


def test_ordinary_strings_are_printed_plain_and_keys_in_the_order_written() -> None:
    container = {"name": "trainer", "image": "registry.example/miles:v1", "args": ["--rollout-shuffle"]}
    text = dump_all([{"spec": {"containers": [container]}}])
    assert text == (
        "spec:\n"
        "  containers:\n"
        "  - name: trainer\n"
        "    image: registry.example/miles:v1\n"
        "    args:\n"
        "    - --rollout-shuffle\n"
    )


def test_the_run_config_json_is_printed_as_a_literal_block_and_reads_back_the_same() -> None:
    config = '{\n  "rollout": 1,\n  "model": "Qwen/Qwen3-4B"\n}\n'
    text = dump_all([{"data": {"config.json": config}}])
    assert text == 'data:\n  config.json: |\n    {\n      "rollout": 1,\n      "model": "Qwen/Qwen3-4B"\n    }\n'
    assert decode_all(text)[0]["data"]["config.json"] == config
