"""The host checks: libcuda, /dev/shm, EFA, GDRCopy and the checkpoint directory, on stand-in devices."""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from grpo_launcher import host_checks
from grpo_launcher.checks import Status
from grpo_launcher.host_checks import (
    HostPaths,
    check_checkpoint_dir,
    check_efa,
    check_gdrcopy,
    check_libcuda,
    check_shm,
)

from tests.support.launcher import executable

# -- libcuda ------------------------------------------------------------------------------------------------


def test_libcuda_passes_when_cuinit_succeeds(stub_libcuda: Callable[..., Path], host: HostPaths) -> None:
    lib = stub_libcuda(0)
    result = check_libcuda(dataclasses.replace(host, libcuda=str(lib)), gpus_expected=8)
    assert result.status is Status.PASS
    assert str(lib) in result.reason
    assert "CUDA 13.0" in result.reason


def test_libcuda_error_803_fails_and_points_at_the_compat_directory(
    stub_libcuda: Callable[..., Path], host: HostPaths
) -> None:
    result = check_libcuda(dataclasses.replace(host, libcuda=str(stub_libcuda(803))), gpus_expected=8)
    assert result.status is Status.FAIL
    assert "Error 803" in result.reason
    assert "/usr/local/cuda*/compat" in result.reason


def test_a_forward_compat_libcuda_that_works_today_is_a_warning(
    stub_libcuda: Callable[..., Path], host: HostPaths
) -> None:
    lib = stub_libcuda(0, "compat/libcuda.so.1")
    result = check_libcuda(dataclasses.replace(host, libcuda=str(lib)), gpus_expected=8)
    assert result.status is Status.WARN
    assert "forward-compat" in result.reason


def test_a_missing_libcuda_fails_on_a_gpu_pod(host: HostPaths) -> None:
    result = check_libcuda(host, gpus_expected=8)
    assert result.status is Status.FAIL
    assert "did not inject the driver" in result.reason


def test_a_missing_libcuda_is_only_a_warning_where_no_gpu_is_expected(host: HostPaths) -> None:
    assert check_libcuda(host, gpus_expected=0).status is Status.WARN


# -- /dev/shm -----------------------------------------------------------------------------------------------


def test_shm_passes_when_large_enough(host: HostPaths) -> None:
    result = check_shm(host, min_gib=0.001)
    assert result.status is Status.PASS
    assert result.data["size_gib"] > 0


def test_shm_smaller_than_the_plan_fails_with_the_emptydir_fix(host: HostPaths) -> None:
    result = check_shm(host, min_gib=10**9)
    assert result.status is Status.FAIL
    assert "sizeLimit" in result.reason


def test_shm_large_enough_but_mostly_used_is_a_warning(host: HostPaths, monkeypatch: pytest.MonkeyPatch) -> None:
    gib_blocks = 2**30 // 4096
    full = SimpleNamespace(f_blocks=64 * gib_blocks, f_bavail=2 * gib_blocks, f_bfree=2 * gib_blocks, f_frsize=4096)
    monkeypatch.setattr(host_checks.os, "statvfs", lambda _path: full)
    result = check_shm(host, min_gib=8)
    assert result.status is Status.WARN
    assert "only 2.0 GiB is free" in result.reason


def test_a_missing_shm_mount_fails(host: HostPaths) -> None:
    result = check_shm(dataclasses.replace(host, shm=host.shm / "absent"), min_gib=1)
    assert result.status is Status.FAIL


# -- EFA ----------------------------------------------------------------------------------------------------


def _efa(host: HostPaths, visible: int, on_node: int, fi_info: str | None = "exit 0") -> HostPaths:
    for i in range(visible):
        (host.infiniband_dev / f"uverbs{i}").touch()
    (host.infiniband_dev / "rdma_cm").touch()  # not an EFA device: must not be counted
    for i in range(on_node):
        (host.infiniband_sysfs / f"rdmap{i}s0").mkdir()
    if fi_info is not None:
        executable(host.fi_info, fi_info)
    return host


def test_no_efa_expected_and_none_visible_passes(host: HostPaths) -> None:
    assert check_efa(host, expected=0).status is Status.PASS


def test_efa_devices_visible_when_none_expected_is_a_warning(host: HostPaths) -> None:
    assert check_efa(_efa(host, visible=2, on_node=2), expected=0).status is Status.WARN


def test_all_requested_efa_devices_and_the_provider_pass(host: HostPaths) -> None:
    result = check_efa(_efa(host, visible=16, on_node=16), expected=16)
    assert result.status is Status.PASS
    assert result.data["uverbs"] == 16


def test_fewer_efa_devices_than_requested_fails(host: HostPaths) -> None:
    result = check_efa(_efa(host, visible=8, on_node=16), expected=16)
    assert result.status is Status.FAIL
    assert "8 EFA devices" in result.reason
    assert "requests 16" in result.reason


def test_a_partial_efa_request_is_called_out_even_when_the_count_matches(host: HostPaths) -> None:
    result = check_efa(_efa(host, visible=8, on_node=32), expected=8)
    assert result.status is Status.WARN
    assert "remote rails" in result.reason


def test_one_device_held_back_by_the_device_plugin_is_normal(host: HostPaths) -> None:
    assert check_efa(_efa(host, visible=15, on_node=16), expected=15).status is Status.PASS


def test_efa_without_fi_info_in_the_image_fails(host: HostPaths) -> None:
    result = check_efa(_efa(host, visible=4, on_node=4, fi_info=None), expected=4)
    assert result.status is Status.FAIL
    assert "EFA installer" in result.reason


def test_libfabric_without_the_efa_provider_fails_with_its_message(host: HostPaths) -> None:
    failing = "echo 'fi_getinfo: -61 (No data available)' >&2; exit 61"
    result = check_efa(_efa(host, visible=4, on_node=4, fi_info=failing), expected=4)
    assert result.status is Status.FAIL
    assert "exited 61" in result.reason
    assert "No data available" in result.reason


def test_an_fi_info_that_cannot_run_fails_with_the_reason(host: HostPaths) -> None:
    _efa(host, visible=4, on_node=4, fi_info=None)
    host.fi_info.parent.mkdir(parents=True, exist_ok=True)
    host.fi_info.write_text("not a program")  # present but not executable
    result = check_efa(host, expected=4)
    assert result.status is Status.FAIL
    assert "cannot run: Permission denied" in result.reason


# -- GDRCopy ------------------------------------------------------------------------------------------------


def test_gdrcopy_not_requested_passes(host: HostPaths) -> None:
    assert check_gdrcopy(host, requested=False).status is Status.PASS


def test_gdrcopy_requested_without_the_device_fails(host: HostPaths) -> None:
    result = check_gdrcopy(host, requested=True)
    assert result.status is Status.FAIL
    assert "gdrdrv" in result.reason


def test_gdrcopy_device_without_the_userspace_library_is_a_warning(host: HostPaths) -> None:
    host.gdrdrv.touch()
    result = check_gdrcopy(host, requested=True)
    assert result.status is Status.WARN
    assert "Failed to initialize GDRCopy" in result.reason


def test_gdrcopy_device_and_library_pass(host: HostPaths) -> None:
    host.gdrdrv.touch()
    (host.gdrcopy_lib_dir / "libgdrapi.so.2").touch()
    assert check_gdrcopy(host, requested=True).status is Status.PASS


NOBODY = 65534


def gdrcopy_as_a_non_root_user(host: HostPaths) -> tuple[str, str]:
    """`check_gdrcopy` run in a child that is not root (root opens any file): as nobody when this is root."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child reports through the pipe and exits without pytest's teardown
        try:
            os.close(read)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            result = check_gdrcopy(host, requested=True)
            os.write(write, f"{result.status.value}\n{result.reason}".encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        status, reason = pipe.read().split("\n", 1)
    os.waitpid(pid, 0)
    return status, reason


@pytest.fixture
def open_host(host: HostPaths) -> Iterator[HostPaths]:
    """A gdrdrv and a libgdrapi in a directory any user can reach (pytest's tmp_path is root's alone)."""
    staged = Path(tempfile.mkdtemp(prefix="gdrcopy-"))
    staged.chmod(0o755)
    (staged / "lib").mkdir(mode=0o755)
    (staged / "lib" / "libgdrapi.so.2").touch()
    yield dataclasses.replace(host, gdrdrv=staged / "gdrdrv", gdrcopy_lib_dir=staged / "lib")
    shutil.rmtree(staged)


def test_a_gdrdrv_the_user_cannot_open_fails_and_one_it_can_open_passes(open_host: HostPaths) -> None:
    open_host.gdrdrv.touch(mode=0o000)
    status, reason = gdrcopy_as_a_non_root_user(open_host)
    assert status == Status.FAIL.value
    assert "not readable and writable by uid" in reason
    open_host.gdrdrv.chmod(0o666)
    assert gdrcopy_as_a_non_root_user(open_host)[0] == Status.PASS.value


# -- checkpoint directory -----------------------------------------------------------------------------------


def test_a_writable_checkpoint_dir_with_room_passes_and_is_left_as_it_was(host: HostPaths, tmp_path: Path) -> None:
    directory = tmp_path / "fsx" / "grpo" / "checkpoints"
    directory.mkdir(parents=True)
    result = check_checkpoint_dir(host, directory, checkpoint_gib=0.001)
    assert result.status is Status.PASS
    assert list(directory.iterdir()) == []  # the write probe is cleaned up


def test_a_checkpoint_dir_yet_to_be_created_is_checked_on_its_parent_and_not_created(
    host: HostPaths, tmp_path: Path
) -> None:
    directory = tmp_path / "fsx" / "grpo" / "checkpoints"
    result = check_checkpoint_dir(host, directory, checkpoint_gib=0.001)
    assert result.status is Status.PASS
    assert "not created yet" in result.reason
    assert not (tmp_path / "fsx").exists()  # no directory made
    assert not list(tmp_path.glob(".grpo-preflight-*"))  # no probe left


def test_a_checkpoint_dir_that_cannot_be_created_fails(host: HostPaths, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = check_checkpoint_dir(host, blocker / "checkpoints", checkpoint_gib=1)
    assert result.status is Status.FAIL
    assert "not writable" in result.reason


def test_too_little_room_for_two_checkpoints_fails(host: HostPaths, tmp_path: Path) -> None:
    result = check_checkpoint_dir(host, tmp_path / "ckpt", checkpoint_gib=10**7)
    assert result.status is Status.FAIL
    assert "two checkpoints" in result.reason


def test_a_nearly_full_lustre_filesystem_is_a_warning(
    host: HostPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "fsx" / "ckpt"
    directory.mkdir(parents=True)
    host.mounts.write_text(f"fsx@tcp:/abc {tmp_path / 'fsx'} lustre rw 0 0\n/dev/root / ext4 rw 0 0\n")
    gib_blocks = 2**30 // 4096
    nine_tenths_full = SimpleNamespace(
        f_blocks=4600 * gib_blocks, f_bavail=459 * gib_blocks, f_bfree=459 * gib_blocks, f_frsize=4096
    )
    real_statvfs = os.statvfs
    monkeypatch.setattr(
        host_checks.os, "statvfs", lambda p: nine_tenths_full if str(p) == str(directory) else real_statvfs(p)
    )
    result = check_checkpoint_dir(host, directory, checkpoint_gib=53)
    assert result.status is Status.WARN
    assert result.data["fs_type"] == "lustre"
    assert "ENOSPC" in result.reason


def test_a_checkpoint_dir_that_dotdots_out_of_the_shared_volume_fails_naming_its_real_path(
    host: HostPaths, tmp_path: Path
) -> None:
    shared = tmp_path / "fsx"
    shared.mkdir()
    (tmp_path / "tmp").mkdir()
    result = check_checkpoint_dir(host, shared / ".." / "tmp" / "ckpt", checkpoint_gib=0.001, shared_mount=shared)
    assert result.status is Status.FAIL
    assert f"real path {tmp_path / 'tmp'} is outside the shared volume at {shared}" in result.reason


def test_a_symlink_out_of_the_shared_volume_fails_and_one_within_it_passes(host: HostPaths, tmp_path: Path) -> None:
    shared = tmp_path / "fsx"
    (shared / "runs").mkdir(parents=True)
    (tmp_path / "local").mkdir()
    (shared / "escape").symlink_to(tmp_path / "local")
    (shared / "inside").symlink_to(shared / "runs")
    escaped = check_checkpoint_dir(host, shared / "escape" / "ckpt", checkpoint_gib=0.001, shared_mount=shared)
    assert escaped.status is Status.FAIL
    assert "outside the shared volume" in escaped.reason
    inside = check_checkpoint_dir(host, shared / "inside" / "ckpt", checkpoint_gib=0.001, shared_mount=shared)
    assert inside.status is Status.PASS, inside.reason
