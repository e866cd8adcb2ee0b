"""One flag table per supported miles version, generated from that version's pinned sources.

`make miles-flags` writes each version's data file and the operator's copy (`grpo_dev.miles_flags.VERSIONS`). At
v0.1.0 miles's SGLang wrapper adds two prefixed copies of SGLang's flags through `_add_prefixed_server_args`
(`miles/backends/sglang_utils/arguments.py:65-141,153-161` at v0.1.0), where dec268f7 had one list `skipped_args`:
the extractor failed there (`ValueError: skipped_args not found`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from grpo_dev import miles_flags
from grpo_dev.miles_flags import VERSIONS, SglangCopy, miles_prefix_sglang, miles_sglang_copies

IDS = list(VERSIONS)


def _table(version: str) -> dict[str, tuple[int, str]]:
    """name -> (least values, most values) from the operator's table of `version`."""
    text = VERSIONS[version].table_module.read_text()
    body = text.split('TABLE = """\\\n', 1)[1].split('"""', 1)[0]
    out = {}
    for line in body.splitlines():
        names, _dest, low, high = line.split("|")[:4]
        for name in names.split(" "):
            out[name] = (int(low), high)
    return out


@pytest.mark.parametrize("version", IDS)
def test_each_versions_committed_data_comes_from_its_pins_and_the_operator_table_from_the_data(version: str) -> None:
    pins = VERSIONS[version]
    data = json.loads(pins.data_file.read_text())
    assert data["sources"]["miles"]["commit"].startswith(pins.miles)
    assert data["sources"]["megatron"]["commit"] == pins.megatron
    assert data["sources"]["router"]["commit"] == pins.router
    assert pins.table_module.read_text() == miles_flags.table_module(data, pins.data_file.name), "run make miles-flags"


@pytest.mark.parametrize(
    ("version", "flag", "arity"),
    [
        pytest.param("dec268f7", "--disable-weights-backuper", (0, "0"), id="dec268f7-has-disable-weights-backuper"),
        pytest.param("v0.1.0", "--disable-weights-backuper", None, id="v0.1.0-removed-disable-weights-backuper"),
        pytest.param("dec268f7", "--use-session-server", (0, "0"), id="dec268f7-use-session-server-no-value"),
        pytest.param("v0.1.0", "--use-session-server", (0, "1"), id="v0.1.0-use-session-server-optional-value"),
        pytest.param("v0.1.0", "--eval-sglang-mem-fraction-static", (1, "1"), id="v0.1.0-eval-sglang-copy"),
    ],
)
def test_the_tables_hold_what_each_version_changed(version: str, flag: str, arity: tuple[int, str] | None) -> None:
    assert _table(version).get(flag) == arity


V010_WRAPPER = """
_SKIPPED_SERVER_ARGS = ["model_path", "port"]
_EVAL_SKIPPED_SERVER_ARGS = _SKIPPED_SERVER_ARGS + ["tp_size"]

def add_sglang_arguments(parser):
    _add_prefixed_server_args(
        parser, flag_prefix="sglang", dest_prefix="sglang_", skipped_args=_SKIPPED_SERVER_ARGS, inherit=False
    )
    _add_prefixed_server_args(
        parser, flag_prefix="eval-sglang", dest_prefix="eval_sglang_", skipped_args=_EVAL_SKIPPED_SERVER_ARGS,
        inherit=True,
    )
"""


def test_a_v010_wrapper_gives_the_sglang_and_the_inheriting_eval_sglang_copies() -> None:
    copies = miles_sglang_copies(V010_WRAPPER)
    assert copies == [
        SglangCopy("sglang", "sglang_", ("model_path", "port"), False),
        SglangCopy("eval-sglang", "eval_sglang_", ("model_path", "port", "tp_size"), True),
    ]
    flags = [
        miles_flags.Flag(["--tp-size", "--tensor-parallel-size"], "tp_size", "int"),
        miles_flags.Flag(["--enable-x"], "enable_x", action="store_true"),
    ]
    names = [[f.names for f in miles_prefix_sglang(flags, copy)] for copy in copies]
    assert names == [
        [["--sglang-tp-size", "--sglang-tensor-parallel-size"], ["--sglang-enable-x"]],
        [["--eval-sglang-enable-x", "--no-eval-sglang-enable-x"]],
    ]


@pytest.mark.skipif(
    not os.environ.get("MILES_GIT"),
    reason="NOT CHECKED: the per-version flag tables were not regenerated from the pinned sources (set MILES_GIT, "
    "MEGATRON_GIT, ROUTER_GIT and SGLANG_WHEEL, or run make miles-flags with them)",
)
@pytest.mark.parametrize("version", IDS)
def test_each_versions_committed_data_is_what_the_extractor_reads_from_its_pins(version: str) -> None:
    pins = VERSIONS[version]
    fresh = miles_flags.extract(
        Path(os.environ["MILES_GIT"]),
        Path(os.environ["MEGATRON_GIT"]),
        Path(os.environ["SGLANG_WHEEL"]),
        pins.miles,
        pins.megatron,
        router_git=Path(os.environ["ROUTER_GIT"]),
        sglang_note=pins.sglang_note,
    )
    committed = json.loads(pins.data_file.read_text())
    assert json.loads(json.dumps(fresh, indent=1, sort_keys=True)) == committed, "run make miles-flags"
