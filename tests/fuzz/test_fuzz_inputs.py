"""Fuzz targets (hypothesis) for every interface that reads untrusted input: the `grpo` loader, the reward
service's in-server request path, and the launcher's run config. Properties: no exception but the
interface's own user error, every message one short line, work bounded. The example budgets are small so
the suite stays fast; the reward service's HTTP surface is fuzzed by schemathesis in
tests/reward_service/test_reward_openapi_fuzz.py.
"""

from __future__ import annotations

import io
import json
import tracemalloc
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml
from grpo_launcher.config import ConfigError, load_run_config, parse_run_config
from grpo_operator.cli import check_text
from grpo_operator.cli import main as grpo_main
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reward_service.extraction import LabelError, Work, extract_final_answer, label_text, last_answer_line
from reward_service.settings import Extraction
from reward_service.worker import quick_verdict

from tests.support.builders import EXAMPLES
from tests.support.fuzzing import examples

QUICKSTART = (EXAMPLES / "quickstart.yaml").read_text()
FAST = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- the grpo loader ----------------------------------------------------------------------------------------

YAML_PIECES = [
    "a: ",
    "- ",
    "&x ",
    "*x ",
    "&y ",
    "*y ",
    "[",
    "]",
    "{",
    "}",
    ", ",
    ": ",
    "\n",
    "  ",
    "'",
    '"',
    "!!int ",
    "!!float ",
    "!!str ",
    "!!binary ",
    "!foo ",
    "<<: ",
    "? ",
    "#",
    "---\n",
    "...\n",
    "1e-6",
    "0x1F",
    "99999999999999999999999",
    "2026-13-45",
    "yes",
    "~",
    "\\",
    "\t",
    "\x00",
    "\x1b",
    "é",
    "%YAML 1.1\n",
]
yaml_like = st.lists(st.sampled_from(YAML_PIECES) | st.text(max_size=5), max_size=80).map("".join)
json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def _one_line_each(lines: list[str]) -> None:
    for line in lines:
        assert "\n" not in line and len(line) < 1200, line[:300]


@FAST
@given(yaml_like)
def test_the_loader_answers_any_text_with_one_line_problems(text: str) -> None:
    checked, file_problems = check_text(text)
    _one_line_each([str(p) for p in file_problems] + [str(p) for c in checked for p in c.problems])


@FAST
@given(
    st.lists(st.sampled_from(QUICKSTART.splitlines()), max_size=40), st.sampled_from(YAML_PIECES), st.integers(0, 39)
)
def test_the_loader_answers_mangled_runs_with_one_line_problems(lines: list[str], piece: str, at: int) -> None:
    lines.insert(min(at, len(lines)), piece)
    checked, file_problems = check_text("\n".join(lines))
    _one_line_each([str(p) for p in file_problems] + [str(p) for c in checked for p in c.problems])


@settings(max_examples=examples(40), deadline=None)
@given(json_values)
def test_grpo_validate_exits_0_or_1_with_one_line_per_problem(
    tmp_path_factory: pytest.TempPathFactory, value: Any
) -> None:
    doc = json.loads(
        json.dumps(
            {"apiVersion": "grpo.dev/v1alpha1", "kind": "GRPORun", "metadata": {"name": "f"}, "spec": value},
            default=str,
        )
    )
    path = Path(tmp_path_factory.mktemp("fuzz")) / "run.json"
    path.write_text(json.dumps(doc))
    out = io.StringIO()
    with redirect_stdout(out):
        code = grpo_main(["validate", "-f", str(path)])
    assert code in (0, 1)
    _one_line_each(out.getvalue().splitlines())


# -- the reward service's in-server path --------------------------------------------------------------------

answer_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=3000) | st.lists(
    st.sampled_from(
        [
            "Answer:",
            "final answer",
            "**",
            "__",
            " ",
            "\t",
            "\n",
            "\\boxed{",
            "\\fbox",
            "}",
            "{",
            "\\",
            "$",
            "42",
            "-7",
            ">",
            "#",
        ]
    ),
    max_size=300,
).map("".join)


@FAST
@given(answer_text, st.integers(-(10**40), 10**40) | st.text(max_size=40) | st.floats() | st.none() | st.booleans())
def test_the_in_server_path_never_raises_and_stays_linear(response: str, label: Any) -> None:
    try:
        gold = label_text(label)
    except LabelError as error:
        assert "\n" not in str(error)
        return
    for mode in Extraction:
        extract_final_answer(response, mode)
        verdict = quick_verdict(gold, response, mode, 16384)
        assert verdict is None or verdict.reward in (0.0, 1.0)
    work = Work()
    last_answer_line(response, work)
    assert work.chars <= 8 * len(response) + 16


# -- the launcher's run config ------------------------------------------------------------------------------


def _base() -> dict[str, Any]:
    return {
        "apiVersion": "grpo.dev/v1alpha1",
        "kind": "RunConfig",
        "run": {"name": "r", "namespace": "n"},
        "preflight": {
            "gpus": 0,
            "minFreeGpuMemoryGiB": 0.0,
            "shmMinGiB": 0.0,
            "fabric": {"type": "efa", "devices": 0},
            "gdrcopy": False,
            "checkpointDir": "/tmp/x",
            "checkpointGiB": 0.0,
        },
    }


@FAST
@given(
    st.sampled_from(["apiVersion", "kind", "run", "preflight", "argv", "env", "spec", "plan"]),
    st.sampled_from(["", "gpus", "gdrcopy", "checkpointDir", "metricsPort", "name"]),
    json_values,
)
def test_a_mutated_run_config_is_accepted_or_refused_with_short_lines(section: str, key: str, value: Any) -> None:
    config = _base()
    if key and isinstance(config.get(section), dict):
        config[section][key] = value
    else:
        config[section] = value
    try:
        parse_run_config(json.dumps(config, default=str))
    except ConfigError as error:
        _one_line_each(str(error).splitlines())


@FAST
@given(st.binary(max_size=400))
def test_any_bytes_as_a_run_config_are_one_short_refusal_or_a_config(
    tmp_path_factory: pytest.TempPathFactory, data: bytes
) -> None:
    path = Path(tmp_path_factory.mktemp("cfg")) / "run-config.json"
    path.write_bytes(data)
    try:
        load_run_config(path)
    except ConfigError as error:
        _one_line_each(str(error).splitlines())


@settings(max_examples=examples(30), deadline=None)
@given(st.integers(2, 12), st.integers(2, 12), st.booleans())
def test_alias_graphs_of_any_shape_stay_within_bounded_memory(levels: int, width: int, mapping: bool) -> None:
    """Each level refers `width` times to the one below: width**levels nodes once expanded."""
    rows = ['l0: &l0 "lol"']
    for i in range(1, levels):
        refs = [f"k{j}: *l{i - 1}" for j in range(width)] if mapping else [f"*l{i - 1}"] * width
        rows.append(f"l{i}: &l{i} " + ("{" if mapping else "[") + ", ".join(refs) + ("}" if mapping else "]"))
    text = "\n".join(rows) + "\n"
    tracemalloc.start()
    try:
        check_text(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024 * 1024, (levels, width, peak)


def test_the_pure_python_parser_gives_the_same_one_line_refusals(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(yaml, "CSafeLoader")
    _, problems = check_text("a: &a [*a]\n")
    assert problems and "contains itself" in problems[0].message
    _, problems = check_text("a: " + "[" * 100_000)
    assert problems and "nested deeper than 64" in problems[0].message
