"""Command line of the local control plane: `build` obtains the binaries, `up` runs one until Ctrl-C.

`python -m grpo_dev.localcluster build` prints, per component, whether it was found in the cache or
built and how long that took, then the cache size. `python -m grpo_dev.localcluster up --kubeconfig
.grpo/kubeconfig` starts a control plane, writes its admin kubeconfig there, and keeps it running until
SIGINT/SIGTERM (then removes everything, the kubeconfig included); `up --simulated` runs a `SimulatedCluster`
instead (kube-scheduler, kwok GPU/EFA and CPU nodes, the KubeRay operator); `up --real-node` adds a real
kubelet node (containerd, runc, a CNI bridge, kube-proxy, CoreDNS; root only) beside the kwok nodes.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from grpo_dev.localcluster import versions
from grpo_dev.localcluster.build import BuildError, build_all, directory_size
from grpo_dev.localcluster.controlplane import ControlPlane, ControlPlaneError
from grpo_dev.localcluster.processes import Terminated
from grpo_dev.localcluster.realnode import RealNodeError, RealNodeUnavailable
from grpo_dev.localcluster.simcluster import SimulatedCluster


def _print(line: str) -> None:
    print(line, flush=True)


def _build(real_node: bool) -> int:
    started = time.monotonic()
    print(f"control-plane components (cache: {versions.cache_root()})", flush=True)
    outcomes = build_all(lambda line: print(line, flush=True), real_node=real_node)
    total = sum(directory_size(o.directory) for o in outcomes if o.action != "external")
    print(
        f"done in {time.monotonic() - started:.1f}s; binaries and CRDs use {total / 2**20:.0f} MiB "
        f"(Go module and build caches are separate: `go env GOMODCACHE GOCACHE`)"
    )
    return 0


def _up(kubeconfig: Path, scheduler: bool, crds: bool, simulated: bool, real_node: bool) -> int:
    crd_dirs: list[Path] | None = None if crds else []
    plane = (
        SimulatedCluster(kubeconfig=kubeconfig.resolve(), real_node=real_node, report=_print)
        if simulated or real_node
        else ControlPlane(
            kubeconfig=kubeconfig.resolve(), scheduler=scheduler, crd_dirs=crd_dirs, kuberay_crds=crds, report=_print
        )
    )
    with plane:
        print(f"ready: export KUBECONFIG={plane.kubeconfig}   (Ctrl-C stops it)", flush=True)
        try:
            while not (dead := plane.dead()):
                time.sleep(1.0)
        except KeyboardInterrupt as interrupt:
            print("stopping", flush=True)
            return interrupt.exit_code if isinstance(interrupt, Terminated) else 0
        print("a control-plane process stopped on its own:\n" + "\n".join(dead), file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grpo_dev.localcluster", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser(
        "build",
        help="obtain etcd, kube-apiserver, kube-controller-manager, kube-scheduler, "
        "kubectl, helm, kwok and its stages, the KubeRay CRDs and operator into the "
        "cache (no-op when present)",
    )
    build.add_argument("--real-node", action="store_true", help="also kubelet, kube-proxy, CoreDNS and the pause image")
    up = commands.add_parser("up", help="run a control plane until Ctrl-C")
    up.add_argument(
        "--kubeconfig",
        type=Path,
        default=Path(".grpo/kubeconfig"),
        help="where to write the admin kubeconfig (default: .grpo/kubeconfig)",
    )
    up.add_argument("--scheduler", action="store_true", help="also run kube-scheduler")
    up.add_argument("--no-crds", dest="crds", action="store_false", help="install neither crds/ nor the KubeRay CRDs")
    up.add_argument(
        "--simulated",
        action="store_true",
        help="a simulated GPU cluster: kube-scheduler, kwok nodes and the KubeRay operator as well",
    )
    up.add_argument(
        "--real-node",
        action="store_true",
        help="the simulated cluster plus a real kubelet node running containers (root; installs containerd, "
        "runc and the CNI plugins with apt-get when missing)",
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            return _build(args.real_node)
        return _up(args.kubeconfig, args.scheduler, args.crds, args.simulated, args.real_node)
    except (BuildError, ControlPlaneError, RealNodeError, RealNodeUnavailable) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as interrupt:
        return interrupt.exit_code if isinstance(interrupt, Terminated) else 130


if __name__ == "__main__":
    sys.exit(main())
