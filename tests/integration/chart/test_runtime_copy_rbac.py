"""The runtime copy out of reach, on the real API server with the chart's RBAC: the operator, on nothing but its
ServiceAccount token, makes and reads its status key Secret in its own namespace; a user who may patch a run and
its status (as roles granting grporuns/status, */status or * allow) takes the locks off status.runtime and edits
the guards the runtime locks; the edit is refused naming the lock, a RuntimeAltered event says the copy was not
used, and `grpo doctor`'s reads of the namespace name the user among those who may write grporuns/status.

Only the API server and the operator as a subprocess run here (tests/support/chartinstall.py): no RayCluster gets
ready, so no Ray head is called.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from grpo_operator.cli.clusterread import connect, read
from grpo_operator.cli.doctorchecks import Verdict
from grpo_operator.cli.doctorchecks.access import status_writers

from tests.support.builders import EXAMPLES
from tests.support.chartinstall import ChartOperator, Install, assert_nothing_denied_but_kopf_scanning, can_i, installed
from tests.support.operator_harness import get_run, manifest, phase_is, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(params=["cluster", "namespaced"])
def install(request: pytest.FixtureRequest, control_plane: Any, namespace: str, kubectl: Any) -> Iterator[Install]:
    """The chart cluster-wide into the run's namespace, or into its own namespace (where the status key's Role is
    the only grant the operator has there)."""
    with installed(control_plane, kubectl, namespace, request.param) as found:
        yield found


# A user of the run's namespace who may write its status, as roles granting grporuns/status (or */status, or *)
# allow: what issue 45 is about.
MALLORY = "mallory"
IB = EXAMPLES / "runtimes" / "h100-infiniband.yaml"


def _guarded_runtime(name: str) -> dict[str, Any]:
    """The InfiniBand example under `name`, locking spec.guards to a default of its own (no Kueue queue here)."""
    doc: dict[str, Any] = yaml.safe_load(IB.read_text())
    doc["metadata"] = {"name": name}
    doc["spec"]["defaults"]["scheduling"].pop("queueName")
    doc["spec"]["defaults"]["guards"] = {"consecutiveRollouts": 3}
    doc["spec"]["locks"]["fields"] = ["guards"]
    return doc


def _status_writer(kubectl: Any, namespace: str) -> None:
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "run-editor", "namespace": namespace},
        "rules": [
            {"apiGroups": ["grpo.dev"], "resources": ["grporuns"], "verbs": ["get", "list", "watch", "patch"]},
            {"apiGroups": ["grpo.dev"], "resources": ["grporuns/status"], "verbs": ["get", "patch"]},
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "run-editor", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "run-editor"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": MALLORY}],
    }
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [role, binding]}))


def test_a_user_who_may_write_grporuns_status_cannot_unlock_a_field_by_rewriting_the_runtime_copy(
    install: Install, control_plane: Any, namespace: str, kubectl: Any, tmp_path: Path
) -> None:
    """The chart installed, the operator on its ServiceAccount token alone (so its status key Secret is made and read
    under the chart's RBAC), and a user who may patch the run and its status: a status.runtime with its locks taken
    off is not used, and the user's edit of the guards the runtime locks is refused naming the lock."""
    runtime = f"rt-{uuid.uuid4().hex[:8]}"
    kubectl("apply", "-f", "-", input=yaml.safe_dump(_guarded_runtime(runtime)))
    _status_writer(kubectl, namespace)
    token = control_plane.token_kubeconfig(install.operator_namespace, install.service_account)
    op = ChartOperator(install, token, namespace, "http://127.0.0.1:9", tmp_path)  # no job is ever submitted
    op.start()
    try:
        run = "guarded"
        spec = {"runtimeRef": {"name": runtime}}
        kubectl("apply", "-f", "-", input=manifest(run, namespace, spec, example="runtimes/quickstart", ray_token=None))
        sealed = wait_for(
            "status.runtime sealed", lambda: get_run(kubectl, namespace, run).get("status", {}).get("runtimeDigest")
        )
        key = install.container_env("GRPO_STATUS_KEY_SECRET")
        # The key: made by the operator under the chart's Role, readable by it by name, not listable.
        assert kubectl("get", "secret", key, "-n", install.operator_namespace, check=False).returncode == 0
        assert can_i(kubectl, install, "get", f"secret/{key}", "-n", install.operator_namespace)
        if install.mode == "namespaced":  # cluster-wide, the operator's ClusterRole reads Secrets by name anywhere
            assert not can_i(kubectl, install, "get", "secret/other", "-n", install.operator_namespace)
            assert not can_i(kubectl, install, "list", "secrets", "-n", install.operator_namespace)
        as_mallory = ("-n", namespace, f"--as={MALLORY}")
        # The user takes every lock off the copy the run resolves against ...
        record = get_run(kubectl, namespace, run)["status"]["runtime"]
        record["spec"]["locks"] = {"fields": [], "imagePrefixes": [], "maxNodesPerRun": None}
        record["spec"]["defaults"]["env"] = {"LD_PRELOAD": "/shared/mallory.so"}  # and adds env to every Ray pod
        patch = json.dumps({"status": {"runtime": record}})
        kubectl("patch", "grporun", run, *as_mallory, "--subresource=status", "--type=merge", "-p", patch)
        # ... and sets the guards the runtime locks to a value of their own.
        edit = json.dumps({"spec": {"guards": {"consecutiveRollouts": 50}}})
        kubectl("patch", "grporun", run, *as_mallory, "--type=merge", "-p", edit)
        done = wait_for("Failed", lambda: phase_is(kubectl, namespace, run, "Failed"))["status"]
        assert done["reason"] == "InvalidSpec", (done, op.logs()[-3000:])
        assert "spec.guards" in done["message"] and "locks.fields lists guards" in done["message"]
        assert f"on GRPORuntime {runtime}" in done["message"]
        assert (done.get("runtime") or {}).get("spec", {}).get("locks", {}).get("fields") in (None, ["guards"])
        assert done.get("runtimeDigest") != sealed
        assert "LD_PRELOAD" not in json.dumps(done)  # whatever copy is written now is the live one, nothing added
        events = json.loads(kubectl("get", "events", "-n", namespace, "-o", "json").stdout)["items"]
        altered = [e for e in events if e["involvedObject"]["name"] == run and e["reason"] == "RuntimeAltered"]
        assert altered and altered[0]["type"] == "Warning", [e["reason"] for e in events]
        assert "status.runtime" in altered[0]["message"] and "not used" in altered[0]["message"]
        # grpo doctor's own reads of the namespace name the user among those who may write grporuns/status.
        api, _ = connect(str(control_plane.kubeconfig), None)
        with api:
            writers = status_writers(read(api, namespace, None))
        assert writers is not None and writers.verdict is Verdict.WARN, writers
        assert f"User {MALLORY}: patch by Role run-editor (RoleBinding run-editor)" in writers.found
        # ... and no one else: the API server's own bootstrap bindings and the chart's are not writers to warn of.
        assert "by 1 subject(s)" in writers.found, writers.found
    finally:
        op.stop()
        kubectl("delete", "grporuntime", runtime, "--ignore-not-found", "--wait=false", check=False)
    assert_nothing_denied_but_kopf_scanning(op.logs())
