"""Preflight checks of the pod itself: libcuda, /dev/shm, the fabric (EFA, InfiniBand or RoCE), GDRCopy and the
checkpoint directory.

Every path is injectable through ``HostPaths`` so CPU tests stand devices in with temporary directories and
stand-in executables. None of these checks imports torch; the GPU checks live in ``gpu_checks``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_launcher.checks import CheckResult, failed, gib, passed, warned

# cuInit results worth a sentence of their own (cuda.h, CUresult).
_CU_ERRORS = {
    100: "CUDA_ERROR_NO_DEVICE: the driver sees no GPU in this container (is nvidia.com/gpu requested, "
    "and is NVIDIA_VISIBLE_DEVICES not 'void'?)",
    802: "CUDA_ERROR_SYSTEM_NOT_READY: the fabric manager is not running on the node",
    803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH (Error 803): the libcuda in the image does not match the host "
    "kernel driver; a CUDA forward-compat copy under /usr/local/cuda*/compat is the usual cause, remove it",
    804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE: forward compatibility is not supported on this GPU; "
    "remove /usr/local/cuda*/compat from the image",
    999: "CUDA_ERROR_UNKNOWN: the driver failed to initialise",
}

FULL_FS_FRACTION = 0.80
FI_INFO_TIMEOUT = 60


@dataclass(frozen=True)
class HostPaths:
    """Where the host checks look; the defaults are the real locations in the trainer image."""

    libcuda: str = "libcuda.so.1"
    shm: Path = Path("/dev/shm")
    infiniband_dev: Path = Path("/dev/infiniband")
    infiniband_sysfs: Path = Path("/sys/class/infiniband")
    fi_info: Path = Path("/opt/amazon/efa/bin/fi_info")
    ibv_devinfo: Path = Path("/usr/bin/ibv_devinfo")
    gdrdrv: Path = Path("/dev/gdrdrv")
    gdrcopy_lib_dir: Path = Path("/opt/gdrcopy/lib")
    mounts: Path = Path("/proc/mounts")


class _DlInfo(ctypes.Structure):
    _fields_ = [
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    ]


def _resolved_path(function: Any) -> str:
    """The file a loaded symbol came from (dladdr), or '' when it cannot be told."""
    info = _DlInfo()
    try:
        libc = ctypes.CDLL(None)
        address = ctypes.cast(function, ctypes.c_void_p)
        if libc.dladdr(address, ctypes.byref(info)) and info.dli_fname:
            return str(os.path.realpath(info.dli_fname.decode()))
    except (OSError, AttributeError, ctypes.ArgumentError):
        return ""
    return ""


def check_libcuda(paths: HostPaths, gpus_expected: int) -> CheckResult:
    """libcuda.so.1 loads and cuInit(0) succeeds; a forward-compat copy is called out by path."""
    name = "libcuda"
    try:
        lib = ctypes.CDLL(paths.libcuda)
    except OSError as exc:
        reason = f"{paths.libcuda} cannot be loaded ({exc}); the NVIDIA container runtime did not inject the driver"
        if gpus_expected == 0:
            return warned(name, reason + "; tolerated because this pod expects no GPUs")
        return failed(name, reason)
    path = _resolved_path(lib.cuInit)
    code = int(lib.cuInit(0))
    version = ctypes.c_int(0)
    driver_cuda = ""
    get_version = getattr(lib, "cuDriverGetVersion", None)
    if code == 0 and get_version is not None and int(get_version(ctypes.byref(version))) == 0:
        driver_cuda = f"{version.value // 1000}.{version.value % 1000 // 10}"
    where = f" from {path}" if path else ""
    if code != 0:
        meaning = _CU_ERRORS.get(code, f"CUresult {code}")
        reason = f"cuInit failed with {code}{where}: {meaning}"
        if gpus_expected == 0:
            return warned(name, reason + "; tolerated because this pod expects no GPUs", cu_result=code)
        return failed(name, reason, cu_result=code, path=path)
    if "/compat/" in path:
        return warned(
            name,
            f"libcuda loaded from the CUDA forward-compat copy {path}; it works now but breaks (Error 803) "
            "as soon as the host driver is newer; remove /usr/local/cuda*/compat from the image",
            path=path,
        )
    return passed(name, f"cuInit ok{where}, driver supports CUDA {driver_cuda}", path=path, driver_cuda=driver_cuda)


def check_shm(paths: HostPaths, min_gib: float) -> CheckResult:
    """The shared-memory mount is at least ``min_gib`` (NCCL and SGLang put their shared buffers there)."""
    name = "shm"
    try:
        st = os.statvfs(paths.shm)
    except OSError as exc:
        return failed(name, f"{paths.shm} cannot be read: {exc.strerror}; mount an emptyDir with medium: Memory")
    size, free = gib(st.f_blocks * st.f_frsize), gib(st.f_bavail * st.f_frsize)
    data = {"size_gib": round(size, 2), "free_gib": round(free, 2)}
    if size < min_gib:
        return failed(
            name,
            f"{paths.shm} is {size:.1f} GiB, the plan needs at least {min_gib:g} GiB; raise the "
            f"dshm emptyDir "
            "sizeLimit (medium: Memory)",
            **data,
        )
    if free < min_gib:
        return warned(name, f"{paths.shm} is {size:.1f} GiB but only {free:.1f} GiB is free (< {min_gib:g})", **data)
    return passed(name, f"{paths.shm} is {size:.1f} GiB, {free:.1f} GiB free (>= {min_gib:g} GiB)", **data)


def _count(directory: Path, prefix: str = "") -> int:
    try:
        return sum(1 for p in directory.iterdir() if p.name.startswith(prefix))
    except OSError:
        return 0


def check_efa(paths: HostPaths, expected: int) -> CheckResult:
    """The pod sees exactly as many EFA devices as it requested, and libfabric finds the efa provider."""
    name = "efa"
    found = _count(paths.infiniband_dev, "uverbs")
    on_node = _count(paths.infiniband_sysfs)
    data = {"uverbs": found, "node_devices": on_node, "expected": expected}
    if expected == 0:
        if found:
            return warned(name, f"{found} EFA devices are visible but the plan expects none (efaPerNode 0)", **data)
        return passed(name, "no EFA expected and none visible", **data)
    if found != expected:
        return failed(
            name,
            f"{found} EFA devices under {paths.infiniband_dev} (uverbs*), the plan requests "
            f"{expected}; request "
            "vpc.amazonaws.com/efa equal to the node's allocatable count",
            **data,
        )
    if not paths.fi_info.exists():
        return failed(
            name,
            f"{found} EFA devices but {paths.fi_info} is missing: the image lacks the EFA installer",
            **data,
        )
    try:
        probe = subprocess.run(
            [str(paths.fi_info), "-p", "efa", "-t", "FI_EP_RDM"],
            capture_output=True,
            text=True,
            timeout=FI_INFO_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return failed(name, f"fi_info -p efa did not answer within {FI_INFO_TIMEOUT} s", **data)
    except OSError as exc:
        return failed(name, f"{paths.fi_info} cannot run: {exc.strerror}", **data)
    if probe.returncode != 0:
        detail = (probe.stderr or probe.stdout).strip().splitlines()
        return failed(
            name,
            f"fi_info -p efa exited {probe.returncode}: {detail[-1] if detail else 'no output'}",
            **data,
        )
    if on_node > expected + 1:
        return warned(
            name,
            f"{found} EFA devices as requested, but the node has {on_node}: a partial request "
            f"passes all-reduce "
            "and then fails point-to-point (NET/OFI Unexpected number of remote rails); request all of them",
            **data,
        )
    return passed(name, f"{found} EFA devices as requested; libfabric has the efa provider", **data)


IBV_DEVINFO_TIMEOUT = 60


def parse_ibv_devinfo(text: str) -> dict[str, list[tuple[str, str]]]:
    """ibv_devinfo's report as {hca_id: [(port state, link layer), ...]} (its format: docs/integrations/rdma-core.md)."""
    devices: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    state = ""
    for raw in text.splitlines():
        key, _, value = raw.strip().partition(":")
        value = value.strip()
        if key == "hca_id":
            current = devices.setdefault(value, [])
        elif current is not None and key == "port":
            state = ""
        elif current is not None and key == "state":
            state = value.split(" ")[0]
        elif current is not None and key == "link_layer":
            current.append((state, value))
    return devices


def check_infiniband(paths: HostPaths, expected: int) -> CheckResult:
    """The pod sees at least as many InfiniBand HCAs with an active IB port as it requested (ibv_devinfo)."""
    return _check_rdma(paths, expected, "infiniband", "InfiniBand", "InfiniBand")


def check_roce(paths: HostPaths, expected: int) -> CheckResult:
    """The pod sees at least as many RDMA NICs with an active Ethernet port (RoCE) as it requested (ibv_devinfo
    prints `link_layer: Ethernet` for a RoCE port, `InfiniBand` for an IB one)."""
    return _check_rdma(paths, expected, "roce", "RoCE", "Ethernet")


def _check_rdma(paths: HostPaths, expected: int, name: str, label: str, link_layer: str) -> CheckResult:
    if expected == 0:
        return passed(name, f"no {label} devices expected (single-node run)")
    if not paths.ibv_devinfo.exists():
        return failed(
            name,
            f"{paths.ibv_devinfo} is missing: the image lacks rdma-core's ibv_devinfo (install ibverbs-utils)",
            expected=expected,
        )
    try:
        probe = subprocess.run(
            [str(paths.ibv_devinfo)], capture_output=True, text=True, timeout=IBV_DEVINFO_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired:
        return failed(name, f"ibv_devinfo did not answer within {IBV_DEVINFO_TIMEOUT} s", expected=expected)
    except OSError as exc:
        return failed(name, f"{paths.ibv_devinfo} cannot run: {exc.strerror}", expected=expected)
    devices = parse_ibv_devinfo(probe.stdout)
    active = sorted(h for h, ports in devices.items() if ("PORT_ACTIVE", link_layer) in ports)
    data = {"devices": sorted(devices), "active": active, "expected": expected}
    if probe.returncode != 0 and not devices:
        detail = (probe.stderr or probe.stdout).strip().splitlines()
        return failed(
            name,
            f"ibv_devinfo exited {probe.returncode}: {detail[-1] if detail else 'no output'}; the pod sees no RDMA "
            "device: request the fabric's resource (resourceName in the runtime's instance type)",
            **data,
        )
    if len(active) < expected:
        down = sorted(set(devices) - set(active))
        return failed(
            name,
            f"{len(active)} {label} devices with an active port ({', '.join(active) or 'none'}), the plan "
            f"requests {expected}"
            + (f"; not active or not {label}: {', '.join(down)}" if down else "")
            + "; check the node's links (ibstat) and that the pod requests all of the fabric's devices",
            **data,
        )
    return passed(name, f"{len(active)} {label} devices with an active port ({', '.join(active)})", **data)


def check_no_fabric(_paths: HostPaths, _expected: int) -> CheckResult:
    return passed("fabric", "no fabric between nodes (single-node run): nothing to check")


# One check per fabric type the run config may name (config.FabricType): a new fabric is a type, a check and a row.
FABRIC_CHECKS: dict[str, Callable[[HostPaths, int], CheckResult]] = {
    "efa": check_efa,
    "infiniband": check_infiniband,
    "roce": check_roce,
    "none": check_no_fabric,
}


def check_gdrcopy(paths: HostPaths, requested: bool) -> CheckResult:
    """/dev/gdrdrv is present when GDRCopy is requested, and the userspace library is in the image."""
    name = "gdrcopy"
    present = paths.gdrdrv.exists()
    has_lib = any(paths.gdrcopy_lib_dir.glob("libgdrapi.so*"))
    data = {"gdrdrv": present, "libgdrapi": has_lib}
    if not requested:
        return passed(name, f"not requested ({paths.gdrdrv} {'present' if present else 'absent'})", **data)
    if not present:
        return failed(
            name,
            f"GDRCopy requested but {paths.gdrdrv} is absent: the gdrdrv kernel module is not "
            f"loaded on the node "
            "or the device is not passed into the pod",
            **data,
        )
    if not os.access(paths.gdrdrv, os.R_OK | os.W_OK):
        return failed(name, f"{paths.gdrdrv} is present but not readable and writable by uid {os.getuid()}", **data)
    if not has_lib:
        return warned(
            name,
            f"{paths.gdrdrv} present but no libgdrapi.so under {paths.gdrcopy_lib_dir}; NET/OFI will log "
            "'Failed to initialize GDRCopy' and run without it",
            **data,
        )
    return passed(name, f"{paths.gdrdrv} present and libgdrapi installed", **data)


def _fs_type(mounts: Path, directory: Path) -> str:
    """The filesystem type of the longest mount point containing ``directory``."""
    best, kind = "", ""
    try:
        lines = mounts.read_text().splitlines()
    except OSError:
        return ""
    target = str(directory)
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1]
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) > len(best):
            best, kind = point, fields[2]
    return kind


class _Unusable(Exception):
    """A checkpoint path that Megatron's `os.makedirs` would fail on, with the reason."""


def _existing(directory: Path) -> Path:
    """`directory`, or its nearest ancestor that exists. A dangling or looping symlink on the way, a path the
    kernel refuses (too long) or a directory this uid cannot enter raises `_Unusable`: a save would fail there."""
    for candidate in (directory, *directory.parents):
        try:
            candidate.stat()
            return candidate
        except (FileNotFoundError, NotADirectoryError):  # a file on the way is refused as not writable below
            if os.path.islink(candidate):
                target = _shown(Path(os.readlink(candidate)))
                raise _Unusable(f"{_shown(candidate)} is a symlink to {target}, which does not exist") from None
        except OSError as exc:
            why = "a symlink loop" if exc.errno == errno.ELOOP else exc.strerror
            raise _Unusable(f"{_shown(candidate)} cannot be reached by uid {os.getuid()}: {why}") from None
    return Path("/")


def _shown(directory: Path, limit: int = 120) -> str:
    text = str(directory)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _off_the_shared_volume(where: Path, shared: Path) -> str | None:
    """Why `where` (an existing path) is not on the shared volume mounted at `shared`, or None when it is. Its
    real path counts: a `..` or a symlink out of the mount lands on the pod's own disk, lost with the pod."""
    real, mount = os.path.realpath(where), os.path.realpath(shared)
    if real == mount or real.startswith(mount.rstrip("/") + "/"):
        return None
    return f"its real path {_shown(Path(real))} is outside the shared volume at {_shown(shared)}"


def check_checkpoint_dir(
    paths: HostPaths, directory: Path, checkpoint_gib: float, shared_mount: Path | None = None
) -> CheckResult:
    """The checkpoint directory (or, when miles has yet to create it, its nearest existing ancestor) is on the
    shared volume (`shared_mount`, when given: by its real path), writable, and has room for two checkpoints of
    the planned size. The check changes nothing: it creates no directory (Megatron's save makes the path
    itself), and its write probe is removed whatever happens."""
    name = "checkpoint"
    try:
        where = _existing(directory)
    except _Unusable as exc:
        return failed(
            name,
            f"{_shown(directory)} cannot hold checkpoints: {exc}; fix: point checkpointDir at a "
            "directory on the shared volume that the trainer's uid can enter and write",
        )
    outside = _off_the_shared_volume(where, shared_mount) if shared_mount is not None else None
    if outside is not None:
        return failed(
            name,
            f"{_shown(directory)} cannot hold checkpoints: {outside}, so they would be lost with the pod; fix: "
            "point checkpointDir at a directory under the shared volume (no symlink leading out of it)",
        )
    try:
        if not where.is_dir():
            raise NotADirectoryError(20, "Not a directory", str(where))
        descriptor, probe = tempfile.mkstemp(prefix=".grpo-preflight-", dir=where)
        try:
            os.write(descriptor, b"grpo preflight write probe\n")
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
            os.unlink(probe)
        st = os.statvfs(where)
    except OSError as exc:
        return failed(name, f"{_shown(directory)} is not writable: {exc.strerror} ({exc.filename or where})")
    free, total = gib(st.f_bavail * st.f_frsize), gib(st.f_blocks * st.f_frsize)
    need = 2 * checkpoint_gib
    used_fraction = 1 - (st.f_bfree / st.f_blocks) if st.f_blocks else 0.0
    fs = _fs_type(paths.mounts, where)
    data = {
        "free_gib": round(free, 1),
        "needed_gib": round(need, 1),
        "fs_type": fs,
        "used": round(used_fraction, 3),
    }
    if free < need:
        return failed(
            name,
            f"{directory} has {free:.1f} GiB free, two checkpoints of {checkpoint_gib:g} GiB need "
            f"{need:g} GiB; "
            "free space or point checkpointDir at a larger volume",
            **data,
        )
    if used_fraction > FULL_FS_FRACTION:
        return warned(
            name,
            f"{directory} has {free:.1f} GiB free (>= {need:g}) but its {fs or 'filesystem'} of "
            f"{total:.0f} GiB is "
            f"{used_fraction:.0%} full; on Lustre a save can hit ENOSPC on a full OST before df shows it",
            **data,
        )
    pending = "" if where == directory else f" (not created yet: miles creates it under {where})"
    return passed(
        name, f"{directory} writable{pending}, {free:.1f} GiB free (>= {need:g} GiB for two checkpoints)", **data
    )
