"""Obtaining the control-plane binaries and CRDs, once, into the cache.

This module owns turning the pins in `versions` into files on disk with no manual step:

- kube-apiserver, kube-controller-manager, kube-scheduler and kubectl: `go build` of `k8s.io/kubernetes` at a
  pinned release, through a scratch module that `replace`s every staging module (`k8s.io/api`, ...) with its
  published `v0.Y.Z` tag (`go install ...@version` cannot work: the module requires them at `v0.0.0`).
  kubectl has its own scratch module and cache directory, and shares the Go build cache with the others.
- etcd: `go build` of the main package `go.etcd.io/etcd/server/v3` through a scratch module.
- kubelet and kube-proxy (the real node): the same build of `k8s.io/kubernetes`, in a cache directory of their own.
- pause (the real node's sandbox image): a ten-line static Go program, packed here as a `docker save` archive.
- helm, kwok, the KubeRay operator and Kueue's manager: `go install <main package>@<version>` (their go.mod files have no
  `replace` directives, so the published module builds as it is).
- CoreDNS: a main package of our own that imports `coremain` and only the plugins the real node uses.
- the kwok stage files, the KubeRay CRDs and Kueue's CRDs: copied from the modules (`kustomize/stage/...` of
  `sigs.k8s.io/kwok`, `config/crd/bases/` of `github.com/ray-project/kuberay/ray-operator`), fetched with
  `go mod download`.

Everything goes through the ordinary `go` client (default GOPROXY). Each component is built in
`<cache>/_build/`, then moved into `<cache>/<component>-<version>/` in one rename, under a file lock, so
an interrupted or concurrent build never leaves a half-filled directory that looks complete.
`$GRPO_CONTROL_PLANE_BIN_DIR` (binaries), `$GRPO_KUBERAY_CRD_DIR` (CRD YAMLs) and `$GRPO_KWOK_STAGE_DIR`
(kwok's stage YAMLs) point at existing files instead; whatever they lack is still obtained here.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from grpo_dev.localcluster import versions as v

Report = Callable[[str], None]


class BuildError(RuntimeError):
    """A component could not be obtained; the message says which, why and what to do."""


@dataclass(frozen=True)
class Outcome:
    component: v.Component
    action: str  # "cached", "built" or "external"
    seconds: float
    directory: Path


def _quiet(_: str) -> None:
    return None


def tool_path(name: str, report: Report = _quiet) -> Path:
    """The executable `name` (kubectl, helm, etcd, kube-apiserver, ...), building it first if missing."""
    if name not in v.TOOL_COMPONENT:
        raise BuildError(f"unknown tool {name!r}; known: {', '.join(sorted(v.TOOL_COMPONENT))}")
    override = os.environ.get(v.BIN_DIR_ENV)
    if override:
        candidate = Path(override).expanduser() / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return ensure(v.TOOL_COMPONENT[name], report).directory / name


def _data_dir(component: v.Component, env: str, hint: str, report: Report) -> Path:
    override = os.environ.get(env)
    if override:
        directory = Path(override).expanduser()
        missing = [name for name in component.files if not (directory / name).is_file()]
        if missing:
            raise BuildError(
                f"{env}={override}: missing {', '.join(missing)}; point it at {hint} or unset it "
                "to fetch the pinned version"
            )
        return directory
    return ensure(component, report).directory


def kuberay_crd_dir(report: Report = _quiet) -> Path:
    """A directory holding the pinned KubeRay CRD YAMLs (or `$GRPO_KUBERAY_CRD_DIR`)."""
    override = os.environ.get(v.KUBERAY_CRD_DIR_ENV)
    if override:
        directory = Path(override).expanduser()
        missing = [name for name in v.KUBERAY_CRDS[:2] if not (directory / name).is_file()]
        if missing:
            raise BuildError(
                f"{v.KUBERAY_CRD_DIR_ENV}={override}: missing {', '.join(missing)}; point it at KubeRay's "
                "config/crd/bases directory or unset it to fetch the pinned version"
            )
        return directory
    return ensure(v.KUBERAY, report).directory


def kwok_stage_dir(report: Report = _quiet) -> Path:
    """A directory holding kwok's node and pod stage YAMLs named in `versions.KWOK_STAGES`."""
    return _data_dir(
        v.KWOK_STAGE_FILES,
        v.KWOK_STAGE_DIR_ENV,
        f"a directory holding those files from sigs.k8s.io/kwok@{v.KWOK_VERSION}",
        report,
    )


_DATA_DIRS: dict[v.Component, tuple[str, Callable[[Report], Path]]] = {
    v.KUBERAY: (v.KUBERAY_CRD_DIR_ENV, kuberay_crd_dir),
    v.KWOK_STAGE_FILES: (v.KWOK_STAGE_DIR_ENV, kwok_stage_dir),
}


def build_all(report: Report = print, real_node: bool = False) -> list[Outcome]:
    """Make sure every component is present; report for each whether it was cached or built, and the time.

    `real_node` adds kubelet, kube-proxy, CoreDNS and the pause image (`versions.REAL_NODE_COMPONENTS`)."""
    outcomes: list[Outcome] = []
    override = os.environ.get(v.BIN_DIR_ENV)
    for component in v.COMPONENTS + (v.REAL_NODE_COMPONENTS if real_node else ()):
        external = bool(override) and all((Path(override or "").expanduser() / f).is_file() for f in component.files)
        if external:
            outcomes.append(Outcome(component, "external", 0.0, Path(override or "").expanduser()))
        elif component in _DATA_DIRS and os.environ.get(_DATA_DIRS[component][0]):
            outcomes.append(Outcome(component, "external", 0.0, _DATA_DIRS[component][1](report)))
        else:
            outcomes.append(ensure(component, report))
        last = outcomes[-1]
        report(f"{last.component.dirname:34s} {last.action:8s} {last.seconds:7.1f}s  {last.directory}")
    return outcomes


def ensure(component: v.Component, report: Report = _quiet) -> Outcome:
    """Return the component's cache directory, obtaining it first (under a lock) when incomplete."""
    final = v.component_dir(component)
    if v.is_complete(component):
        return Outcome(component, "cached", 0.0, final)
    root = v.cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with locked(root / f".{component.dirname}.lock"):
        if v.is_complete(component):  # another process finished it while we waited
            return Outcome(component, "cached", 0.0, final)
        started = time.monotonic()
        report(f"{component.dirname}: not in {root}, obtaining it (one time only)")
        staging = root / "_build" / f"{component.dirname}.out"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        _BUILDERS[component.name](component, staging, report)
        missing = [f for f in component.files if not (staging / f).is_file()]
        if missing:
            raise BuildError(f"{component.dirname}: the build finished without producing {missing}")
        shutil.rmtree(final, ignore_errors=True)
        staging.rename(final)
        elapsed = time.monotonic() - started
        report(f"{component.dirname}: ready in {elapsed:.0f}s")
        return Outcome(component, "built", elapsed, final)


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created, with its folder) so concurrent builds of one cache wait."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# --- Go builds ---------------------------------------------------------------------------------------


def _go_env() -> dict[str, str]:
    if shutil.which("go") is None:
        raise BuildError(
            "the `go` command is not on PATH: Go >= 1.26 is needed once, to build the control plane, kubectl, "
            "helm, kwok and the KubeRay operator from the Go module proxy. Install Go, or set "
            f"{v.BIN_DIR_ENV} to a directory holding {', '.join(sorted(v.TOOL_COMPONENT))} (and "
            f"{v.KUBERAY_CRD_DIR_ENV} to KubeRay's config/crd/bases)."
        )
    env = dict(os.environ)
    flags = env.get("GOFLAGS", "").split()
    for flag in ("-trimpath", "-buildvcs=false"):
        if flag not in flags:
            flags.append(flag)
    env.update(GOFLAGS=" ".join(flags), GOTOOLCHAIN="local", CGO_ENABLED="0")
    return env


def _go(args: list[str], workdir: Path, log: Path, **env: str) -> str:
    """Run `go <args>` in `workdir`, appending its output to `log`; return stdout; raise with the tail."""
    with log.open("a") as sink:
        sink.write(f"\n$ go {' '.join(args)}\n")
        sink.flush()
        proc = subprocess.run(
            ["go", *args],
            check=False,
            cwd=workdir,
            env={**_go_env(), **env},
            stdout=subprocess.PIPE,
            stderr=sink,
            text=True,
        )
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise BuildError(f"`go {' '.join(args[:3])} ...` failed in {workdir} (full log: {log}):\n{tail}")
    return proc.stdout


def _scratch_module(component: v.Component, name: str) -> tuple[Path, Path]:
    workdir = v.cache_root() / "_build" / component.dirname
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    log = workdir / "build.log"
    _go(["mod", "init", f"grpo-operator.local/{name}"], workdir, log)
    return workdir, log


def _module_info(module: str, workdir: Path, log: Path) -> dict[str, str]:
    info: dict[str, str] = json.loads(_go(["mod", "download", "-json", module], workdir, log))
    return info


def kubernetes_go_mod(
    kubernetes_go_mod_text: str, version: str, binaries: tuple[str, ...] = v.KUBERNETES_BINARIES
) -> str:
    """The scratch go.mod for building `binaries` (under cmd/) of `k8s.io/kubernetes@version`.

    Every staging module (required at v0.0.0 or replaced with ./staging/...) is replaced by its published
    tag v0.<minor>.<patch>; the go and godebug lines are copied so runtime defaults match upstream.
    """
    staging_version = "v0." + version.removeprefix("v1.")
    required = re.findall(r"^\s*(k8s\.io/\S+)\s+v0\.0\.0(?:\s|$)", kubernetes_go_mod_text, re.MULTILINE)
    replaced = re.findall(r"^\s*(k8s\.io/\S+)\s*=>\s*\./staging/", kubernetes_go_mod_text, re.MULTILINE)
    staging = sorted(set(required) | set(replaced))
    if not staging:
        raise BuildError(f"k8s.io/kubernetes@{version}: found no staging modules in its go.mod")
    go_line = re.search(r"^go\s+(\S+)\s*$", kubernetes_go_mod_text, re.MULTILINE)
    godebug = re.findall(r"^godebug\s.*$", kubernetes_go_mod_text, re.MULTILINE)
    lines = ["module grpo-operator.local/kubernetes", ""]
    lines += [f"go {go_line.group(1) if go_line else '1.26.0'}", *godebug, ""]
    lines += [f"require k8s.io/kubernetes {version}", "", "replace ("]
    lines += [f"\t{m} => {m} {staging_version}" for m in staging]
    lines += [")", "", "tool ("]
    lines += [f"\tk8s.io/kubernetes/cmd/{binary}" for binary in binaries]
    lines += [")", ""]
    return "\n".join(lines)


def _version_ldflags(version: str) -> str:
    minor = version.split(".")[1]
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={version}",
            f"-X {pkg}.gitMajor=1",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
        ]
    return " ".join(flags)


def _build_kubernetes(component: v.Component, out: Path, report: Report) -> None:
    binaries = tuple(component.files)
    workdir, log = _scratch_module(component, "kubernetes")
    report(f"  go mod download k8s.io/kubernetes@{component.version} (log: {log})")
    info = _module_info(f"k8s.io/kubernetes@{component.version}", workdir, log)
    gomod = kubernetes_go_mod(Path(info["GoMod"]).read_text(), component.version, binaries)
    (workdir / "go.mod").write_text(gomod)
    report("  go mod tidy (resolves the staging modules at their published tags)")
    _go(["mod", "tidy"], workdir, log)
    packages = [f"k8s.io/kubernetes/cmd/{binary}" for binary in binaries]
    report(f"  go build -p 2 {' '.join(binaries)}")
    _go(["build", "-p", "2", "-ldflags", _version_ldflags(component.version), "-o", f"{out}/", *packages], workdir, log)


def _go_install(component: v.Component, package: str, out: Path, report: Report, ldflags: str = "-s -w") -> Path:
    """`go install package@version` into `out`; return the work directory (its build.log has the output)."""
    workdir = v.cache_root() / "_build" / component.dirname
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    log = workdir / "build.log"
    report(f"  go install {package}@{component.version} (log: {log})")
    _go(["install", "-p", "2", "-ldflags", ldflags, f"{package}@{component.version}"], workdir, log, GOBIN=str(out))
    return workdir


def _build_helm(component: v.Component, out: Path, report: Report) -> None:
    # helm's Makefile sets the version this way (helm.sh/helm/v4 Makefile, LDFLAGS)
    ldflags = f"-s -w -X helm.sh/helm/v4/internal/version.version={component.version}"
    _go_install(component, "helm.sh/helm/v4/cmd/helm", out, report, ldflags)


def _build_kwok(component: v.Component, out: Path, report: Report) -> None:
    _go_install(component, "sigs.k8s.io/kwok/cmd/kwok", out, report)


def _fetch_kwok_stages(component: v.Component, out: Path, report: Report) -> None:
    workdir = v.cache_root() / "_build" / component.dirname
    workdir.mkdir(parents=True, exist_ok=True)
    module = f"sigs.k8s.io/kwok@{component.version}"
    report(f"  go mod download {module}")
    source = Path(_module_info(module, workdir, workdir / "build.log")["Dir"])
    for name, path in v.KWOK_STAGES.items():
        shutil.copyfile(source / path, out / name)


def _build_kuberay_operator(component: v.Component, out: Path, report: Report) -> None:
    _go_install(component, "github.com/ray-project/kuberay/ray-operator", out, report)


def _build_kueue(component: v.Component, out: Path, report: Report) -> None:
    """Kueue's manager (`cmd/kueue`; its go.mod has no `replace`) and the CRDs it watches, copied from the
    module's config/components/crd/bases."""
    workdir = _go_install(component, "sigs.k8s.io/kueue/cmd/kueue", out, report)
    source = Path(_module_info(f"sigs.k8s.io/kueue@{component.version}", workdir, workdir / "build.log")["Dir"])
    for name in v.KUEUE_CRDS:
        shutil.copyfile(source / "config" / "components" / "crd" / "bases" / name, out / name)


def _build_etcd(component: v.Component, out: Path, report: Report) -> None:
    workdir, log = _scratch_module(component, "etcd")
    module = "go.etcd.io/etcd/server/v3"
    report(f"  go build {module}@{component.version} (log: {log})")
    _go(["mod", "edit", f"-require={module}@{component.version}", f"-tool={module}"], workdir, log)
    _go(["mod", "tidy"], workdir, log)
    ldflags = f"-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=module-{component.version}"
    _go(["build", "-p", "2", "-ldflags", ldflags, "-o", str(out / "etcd"), module], workdir, log)


def _fetch_kuberay_crds(component: v.Component, out: Path, report: Report) -> None:
    workdir = v.cache_root() / "_build" / component.dirname
    workdir.mkdir(parents=True, exist_ok=True)
    module = f"github.com/ray-project/kuberay/ray-operator@{component.version}"
    report(f"  go mod download {module}")
    info = _module_info(module, workdir, workdir / "build.log")
    bases = Path(info["Dir"]) / "config" / "crd" / "bases"
    for name in component.files:
        shutil.copyfile(bases / name, out / name)


def _build_coredns(component: v.Component, out: Path, report: Report) -> None:
    """CoreDNS with only the plugins the real node's Corefile names (`v.COREDNS_PLUGINS`), from a main package
    of our own beside `coremain`, the way CoreDNS documents external builds: its own main imports every plugin
    and with them every cloud provider's SDK, most of the build's time."""
    workdir, log = _scratch_module(component, "coredns")
    module = "github.com/coredns/coredns"
    plugins = "".join(f'\t_ "{module}/plugin/{name}"\n' for name in v.COREDNS_PLUGINS)
    (workdir / "main.go").write_text(
        f'package main\n\nimport (\n\t"{module}/coremain"\n{plugins})\n\nfunc main() {{ coremain.Run() }}\n'
    )
    report(f"  go build {module}@{component.version} with the plugins {', '.join(v.COREDNS_PLUGINS)} (log: {log})")
    _go(["mod", "edit", f"-require={module}@{component.version}"], workdir, log)
    _go(["mod", "tidy"], workdir, log)
    _go(["build", "-p", "2", "-ldflags", "-s -w", "-o", str(out / "coredns"), "."], workdir, log)


PAUSE_REFERENCE = f"localhost/grpo-pause:{v.PAUSE_VERSION}"
# The sandbox process of every pod: it only has to live until it is signalled.
_PAUSE_GO = """package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
}
"""


def docker_archive(binary: Path, reference: str, entrypoint: str) -> bytes:
    """A one-layer image holding `binary` at `/<entrypoint>`, in the `docker save` format (`ctr images import`
    and `podman load` read it): manifest.json, the config named by its digest, the layer tar by its diff ID."""
    layer_buffer = io.BytesIO()
    with tarfile.open(fileobj=layer_buffer, mode="w", format=tarfile.USTAR_FORMAT) as layer:
        info = tarfile.TarInfo(entrypoint)
        data = binary.read_bytes()
        info.size, info.mode, info.mtime = len(data), 0o755, 0
        layer.addfile(info, io.BytesIO(data))
    layer_bytes = layer_buffer.getvalue()
    diff_id = hashlib.sha256(layer_bytes).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": [f"/{entrypoint}"]},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = f"{hashlib.sha256(config_bytes).hexdigest()}.json"
    manifest = [{"Config": config_name, "RepoTags": [reference], "Layers": [f"{diff_id}/layer.tar"]}]
    archive_buffer = io.BytesIO()
    with tarfile.open(fileobj=archive_buffer, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        for name, payload in (
            (config_name, config_bytes),
            (f"{diff_id}/layer.tar", layer_bytes),
            ("manifest.json", json.dumps(manifest).encode()),
        ):
            member = tarfile.TarInfo(name)
            member.size, member.mode, member.mtime = len(payload), 0o644, 0
            archive.addfile(member, io.BytesIO(payload))
    return archive_buffer.getvalue()


def _build_pause(component: v.Component, out: Path, report: Report) -> None:
    workdir, log = _scratch_module(component, "pause")
    (workdir / "main.go").write_text(_PAUSE_GO)
    report(f"  go build pause (log: {log})")
    _go(["build", "-ldflags", "-s -w", "-o", str(out / "pause"), "."], workdir, log)
    (out / "pause.tar").write_bytes(docker_archive(out / "pause", PAUSE_REFERENCE, "pause"))


_BUILDERS: dict[str, Callable[[v.Component, Path, Report], None]] = {
    v.KUBERNETES.name: _build_kubernetes,
    v.ETCD.name: _build_etcd,
    v.KUBECTL.name: _build_kubernetes,
    v.HELM.name: _build_helm,
    v.KUBERAY.name: _fetch_kuberay_crds,
    v.KWOK.name: _build_kwok,
    v.KWOK_STAGE_FILES.name: _fetch_kwok_stages,
    v.KUBERAY_OPERATOR.name: _build_kuberay_operator,
    v.KUEUE.name: _build_kueue,
    v.NODE.name: _build_kubernetes,
    v.COREDNS.name: _build_coredns,
    v.PAUSE.name: _build_pause,
}


def directory_size(path: Path) -> int:
    """Bytes used by the regular files under `path` (0 when it does not exist)."""
    if not path.exists():
        return 0
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())
