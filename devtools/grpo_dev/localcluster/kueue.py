"""Kueue's real controller manager on a local control plane, in the smallest configuration that admits RayClusters.

`start_kueue(plane)` installs Kueue's CRDs (pinned in `versions.KUEUE_CRDS`, from the module) and runs its
manager (`sigs.k8s.io/kueue/cmd/kueue`, built and cached by `build.py`) with a Configuration that enables only
the `ray.io/raycluster` integration (sigs.k8s.io/kueue v0.17.0 pkg/controller/jobs/raycluster).

Webhooks: none is registered with the API server. Kueue's only webhook a run depends on would suspend a
labelled RayCluster on creation (raycluster_webhook.go:87-94); grpo-operator creates it suspended itself
(`grpo_operator.render.queueing`), so admission is the same without it. Kueue's webhook server still starts
(the manager fails without serving certificates) on a loopback port with the control plane's 127.0.0.1
serving certificate, and nothing calls it. `internalCertManagement` is off (it would write Secrets and patch
webhook configurations that do not exist here); the visibility API server (an aggregated API) is off by its
feature gate. The manager runs as cluster admin: this is a test double of a platform install, not one.

Topology Aware Scheduling (tests/operator/test_kueue.py, docs/queueing.md) needs nothing more: its
feature gate is on by default at v0.17.0 (pkg/features/kube_features.go:402-405), the Topology CRD is among
`versions.KUEUE_CRDS`, and its parts are controllers the manager starts (pkg/controller/tas/controllers.go:28-51:
topology, flavor, node, non-TAS usage and the ungater), no webhook: the `kueue.x-k8s.io/topology` scheduling
gate reaches the pods through the pod templates Kueue writes on admission (pkg/podset/podset.go:66-75).

One file outside the work directory: with internalCertManagement off, Kueue v0.17.0 loads a metrics serving
certificate from the fixed path /etc/kueue/metrics/certs (cmd/kueue/main.go:204-218) and exits without one, even
with the metrics server off (`metrics.bindAddress: "0"`, as here, so the pair is only parsed). `start_kueue`
writes a throwaway self-signed pair there once when none exists (root, as on CI; elsewhere it says what to do).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from grpo_dev.localcluster import versions as v
from grpo_dev.localcluster.build import ensure
from grpo_dev.localcluster.controlplane import ControlPlane, ControlPlaneError, _free_port
from grpo_dev.localcluster.pki import Pki, generate


def configuration(health_port: int, webhook_port: int, cert_dir: str) -> dict[str, object]:
    """Kueue's `config.kueue.x-k8s.io/v1beta2` Configuration (apis/config/v1beta2/configuration_types.go)."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": "kueue-system",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": cert_dir},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": ["ray.io/raycluster"]},
    }


METRICS_CERTS = Path("/etc/kueue/metrics/certs")


def _metrics_certs(scratch: Path) -> None:
    """A parseable pair at Kueue's fixed metrics-certificate path (see the module doc), written atomically."""
    if (METRICS_CERTS / "tls.crt").is_file() and (METRICS_CERTS / "tls.key").is_file():
        return
    pair = generate(scratch / "metrics-pki")
    try:
        METRICS_CERTS.mkdir(parents=True, exist_ok=True, mode=0o755)
        for source, name in ((pair.serving_key, "tls.key"), (pair.serving_cert, "tls.crt")):
            staged = METRICS_CERTS / f".{name}.{os.getpid()}"
            shutil.copyfile(source, staged)
            staged.rename(METRICS_CERTS / name)
    except PermissionError as exc:
        raise ControlPlaneError(
            f"Kueue v0.17.0 needs a certificate pair at {METRICS_CERTS} (tls.crt, tls.key; any self-signed pair: "
            f"its metrics server is off here) and this user cannot write it: {exc}. Create it once as root."
        ) from exc


def start_kueue(plane: ControlPlane, report: Callable[[str], None] = lambda _: None) -> None:
    """Install Kueue's CRDs on `plane` and run its manager there until the plane stops; wait for /readyz.
    Once per plane: a second call finds it running and returns."""
    if "kueue" in plane.pids:
        return
    directory = ensure(v.KUEUE, report).directory
    plane.apply_crds(directory / name for name in v.KUEUE_CRDS)
    plane.kubectl("create", "namespace", "kueue-system")
    work = plane.workdir / "kueue"
    certs = work / "certs"
    certs.mkdir(parents=True, exist_ok=True)
    _metrics_certs(work)
    pki = Pki(plane.workdir / "pki")
    shutil.copyfile(pki.serving_cert, certs / "tls.crt")  # the API server's, for 127.0.0.1
    shutil.copyfile(pki.serving_key, certs / "tls.key")
    health = _free_port()
    config = work / "config.yaml"
    config.write_text(json.dumps(configuration(health, _free_port(), str(certs))))  # JSON is YAML
    plane._launch(
        "kueue",
        [
            str(directory / "kueue"),
            f"--kubeconfig={plane.kubeconfig}",
            f"--config={config}",
            "--feature-gates=VisibilityOnDemand=false",
            f"--visibility-server-port={_free_port()}",
            "--zap-log-level=2",
        ],
    )
    plane._wait("Kueue's /readyz", lambda: plane._http_ok(f"http://127.0.0.1:{health}/readyz"))
    report(f"Kueue {v.KUEUE_VERSION}: manager ready (integration ray.io/raycluster, no webhooks registered)")
