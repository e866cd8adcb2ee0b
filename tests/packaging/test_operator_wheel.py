"""The operator image installs only what runs in a cluster.

`operator/Dockerfile` runs `pip install .` of the root pyproject; this builds the same wheel and reads its
file list: the product package is there, the development tooling (local control plane, local Ray head,
`make run` driver, the miles test double, the CRD generator) and the tests are not.
"""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import grpo_operator

REPO = Path(__file__).resolve().parents[2]
PRODUCT = Path(grpo_operator.__file__).parent
DEV_ONLY = ("localcluster", "localray", "devrun", "fake_miles", "crdgen", "grpo_dev", "tests/")


def test_the_operator_wheel_holds_no_dev_tooling_or_test_code(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(REPO),
        ],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    (wheel,) = tmp_path.glob("grpo_operator-*.whl")
    files = zipfile.ZipFile(wheel).namelist()
    assert "grpo_operator/controller/reconciler.py" in files
    assert "grpo_operator/planning/plan.py" in files
    leaked = [f for f in files if any(marker in f for marker in DEV_ONLY)]
    assert not leaked, f"the operator wheel ships development code: {leaked}"


def test_product_code_reads_no_file_from_the_tests_tree() -> None:
    pattern = re.compile(r"""["'/]tests["'/]""")
    offenders = [str(p.relative_to(REPO)) for p in PRODUCT.rglob("*.py") if pattern.search(p.read_text())]
    assert not offenders, f"product modules refer to tests/: {offenders}"
