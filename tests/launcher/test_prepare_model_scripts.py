"""The prepare step reads a miles v0.1.0 model script (`scripts/models/<type>.py`) without running it.

The files below are shaped as miles v0.1.0's (tag v0.1.0, commit 78527b91): `scripts/models/qwen3-4B.py:1-22` (a
parameter defaulting from `MODEL_ARGS_ROTARY_BASE`, then a literal) and `scripts/models/qwen3-30B-A3B.py:1-42`
(a module constant, `from model_args_utils import moe_layer_freq`, `int(os.environ.get(...) or 48)`), trimmed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from grpo_launcher.prepare import ModelScriptError, model_args_from_py, model_args_py_argv

QWEN3_4B = """import os


def model_args(rotary_base: str | None = None) -> str:
    rotary_base = rotary_base if rotary_base is not None else os.environ.get("MODEL_ARGS_ROTARY_BASE") or "1000000"
    return (
        "--swiglu "
        "--num-layers 36 "
        "--hidden-size 2560 "
        "--norm-epsilon 1e-6 "
        f"--rotary-base {rotary_base} "
        "--qk-layernorm "
    )
"""

QWEN3_30B_A3B = """import os

from model_args_utils import moe_layer_freq


FIRST_K_DENSE_REPLACE = 0


def model_args(nlayers: int | None = None, rotary_base: str | None = None) -> str:
    nlayers = nlayers if nlayers is not None else int(os.environ.get("MODEL_ARGS_NUM_LAYERS") or 4)
    rotary_base = rotary_base if rotary_base is not None else os.environ.get("MODEL_ARGS_ROTARY_BASE") or "1000000"
    return (
        f"--num-layers {nlayers} "
        f"--rotary-base {rotary_base} "
        # moe
        f"--moe-layer-freq {moe_layer_freq(nlayers=nlayers, first_k_dense_replace=FIRST_K_DENSE_REPLACE)} "
        "--num-experts 128 "
    )
"""

# A variant derived from another script (`from model_args_utils import load_sibling_model_args`, 15 at v0.1.0).
SIBLING = """from model_args_utils import load_sibling_model_args


def model_args() -> str:
    return load_sibling_model_args(__file__, "qwen3-4B") + " --extra "
"""


@pytest.mark.parametrize(
    ("source", "flags"),
    [
        pytest.param(
            QWEN3_4B,
            [
                *("--swiglu", "--num-layers", "36", "--hidden-size", "2560", "--norm-epsilon", "1e-6"),
                *("--rotary-base", "1000000", "--qk-layernorm"),
            ],
            id="qwen3-4B-dense",
        ),
        pytest.param(
            QWEN3_30B_A3B,
            ["--num-layers", "4", "--rotary-base", "1000000", "--moe-layer-freq", "[1,1,1,1]", "--num-experts", "128"],
            id="qwen3-30B-A3B-moe",
        ),
    ],
)
def test_a_v010_model_script_gives_its_flags_with_the_defaults(source: str, flags: list[str]) -> None:
    assert model_args_from_py(source, "qwen.py") == flags


def test_the_prepare_step_prints_a_v010_model_scripts_flags_one_per_line(tmp_path: Path) -> None:
    models = tmp_path / "scripts" / "models"
    models.mkdir(parents=True)
    (models / "qwen3-4B.py").write_text(QWEN3_4B)
    argv = model_args_py_argv("qwen3-4B", str(tmp_path))
    assert argv[:4] == ["python3", "-m", "grpo_launcher", "model-args"]
    out = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, check=False)
    assert (out.returncode, out.stdout.splitlines()[:3]) == (0, ["--swiglu", "--num-layers", "36"])


def test_a_model_script_that_would_have_to_run_is_refused_on_one_line_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ModelScriptError, match=r"^v\.py:5: a call of 'load_sibling_model_args'") as err:
        model_args_from_py(SIBLING, "v.py")
    assert "\n" not in str(err.value)
    script = tmp_path / "v.py"
    script.write_text(SIBLING)
    out = subprocess.run(
        [sys.executable, "-m", "grpo_launcher", "model-args", str(script)], capture_output=True, text=True, check=False
    )
    assert (out.returncode, out.stdout, len(out.stderr.splitlines())) == (1, "", 1), out.stderr
