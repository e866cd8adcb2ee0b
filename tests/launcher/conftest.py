"""Fixtures for the launcher tests: device stand-ins and a stand-in libcuda (run configs and stand-in programs are
built with tests/support/launcher.py)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from grpo_launcher.host_checks import HostPaths

STUB_LIBCUDA = """
int cuInit(unsigned int flags) { return STUB_RESULT; }
int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
"""


@pytest.fixture
def stub_libcuda(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int, str], Path]:
    """Compile a shared library that exports cuInit (returning ``result``) and cuDriverGetVersion."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the stand-in libcuda")
    root = tmp_path_factory.mktemp("libcuda")

    def build(result: int, relative: str = "libcuda.so.1") -> Path:
        source = root / "stub.c"
        source.write_text(STUB_LIBCUDA)
        target = root / str(result) / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [compiler, "-shared", "-fPIC", f"-DSTUB_RESULT={result}", "-o", str(target), str(source)], check=True
        )
        return target

    return build


@pytest.fixture
def host(tmp_path: Path) -> HostPaths:
    """Device paths stood in by temporary directories: no EFA, no gdrdrv, a real tmp dir as /dev/shm."""
    root = tmp_path / "host"
    for sub in ("shm", "dev-infiniband", "sys-infiniband", "gdrcopy-lib"):
        (root / sub).mkdir(parents=True)
    mounts = root / "mounts"
    mounts.write_text(f"tmpfs {root / 'shm'} tmpfs rw 0 0\n")
    return HostPaths(
        libcuda="libcuda-not-here.so.1",
        shm=root / "shm",
        infiniband_dev=root / "dev-infiniband",
        infiniband_sysfs=root / "sys-infiniband",
        fi_info=root / "efa-bin" / "fi_info",
        ibv_devinfo=root / "rdma-bin" / "ibv_devinfo",
        gdrdrv=root / "gdrdrv",
        gdrcopy_lib_dir=root / "gdrcopy-lib",
        mounts=mounts,
    )
