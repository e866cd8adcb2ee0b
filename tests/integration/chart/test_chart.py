"""The Helm chart, rendered by the real helm: lint-clean, golden, its values checked by its schema, its
settings accepted by the operator, its RBAC covering every kind the operator renders, its pod hardened.

Golden files: tests/chart/golden/ (regenerate with `.venv/bin/python -m tests.chart.golden`).
"""

from __future__ import annotations

import difflib
import re
from typing import Any

import pytest
import yaml
from grpo_operator.cli.doctorchecks import CLUSTER_RULES
from grpo_operator.cli.loading import parse_run
from grpo_operator.controller.config import load_settings
from grpo_operator.planning.documents import parse_runtime
from grpo_operator.planning.instances import DEFAULT_RUNTIME
from grpo_operator.planning.plan import make_plan
from grpo_operator.render import RenderSettings, render

from tests.integration.chart.golden import CASES, GOLDEN, rendered
from tests.support.builders import EXAMPLES, merge
from tests.support.helm import CHART, REPO, by_kind, documents, helm, template


@pytest.mark.parametrize("case", sorted(CASES))
def test_helm_lint_is_clean_in_strict_mode(case: str) -> None:
    args = [arg for value in CASES[case] for arg in ("--set", value)]
    result = helm("lint", "--strict", str(CHART), *args)
    assert "0 chart(s) failed" in result.stdout
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout


@pytest.mark.parametrize("case", sorted(CASES))
def test_helm_template_matches_the_golden_file(case: str) -> None:
    expected = (GOLDEN / f"{case}.yaml").read_text()
    actual = rendered(case)
    diff = "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True), "golden", "helm template"))
    assert not diff, f"the chart renders differently; if intended run `.venv/bin/python -m tests.chart.golden`\n{diff}"


@pytest.mark.parametrize(
    ("value", "names"),
    [
        ("watchNamespaces={Team_A}", ["/watchNamespaces/0", "Team_A", "does not match pattern"]),
        ("settings.httpTimeoutSeconds=0", ["/settings/httpTimeoutSeconds", "minimum"]),
        ("settings.reconcileIntervalSeconds=0", ["/settings/reconcileIntervalSeconds", "minimum"]),
        ("image.digest=sha256:abc", ["/image/digest", "sha256:abc", "does not match pattern"]),
        ("replicas=0", ["/replicas", "minimum"]),
        ("peering.lifetime=3", ["additional properties 'lifetime' not allowed"]),  # a misspelt key
        ("logLevel=loud", ["/logLevel", "must be one of 'info'"]),
    ],
    ids=[
        "a namespace that is no DNS label",
        "httpTimeoutSeconds 0",
        "reconcileIntervalSeconds 0",
        "a short digest",
        "no replicas",
        "a misspelt peering key",
        "an unknown log level",
    ],
)
def test_a_bad_value_is_refused_with_the_field_and_the_rule(value: str, names: list[str]) -> None:
    result = helm("template", "grpo", str(CHART), "--set", value, check=False)
    assert result.returncode != 0
    for name in names:
        assert name in result.stderr


def _container(rendered_text: str) -> dict[str, Any]:
    [deployment] = by_kind(rendered_text, "Deployment")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    return dict(container)


def test_every_setting_the_chart_passes_is_accepted_by_the_operator_with_the_values_given() -> None:
    text = template(
        "settings.reconcileIntervalSeconds=7",
        "json:settings.rewardErrorRatioMax=0.25",
        "rewardService.image=registry.example/reward@sha256:" + "c" * 64,
        "metrics.port=9100",
        'json:settings.gpuHourPricesUSD={"p5en.48xlarge": 5.2}',
        "settings.maxGraceSeconds=900",
    )
    env = {e["name"]: e["value"] for e in _container(text)["env"]}
    settings = load_settings(env)  # raises SettingsError on an unknown GRPO_* name or a bad value
    assert settings.reconcile_interval_seconds == 7
    assert settings.gpu_hour_prices_usd == {"p5en.48xlarge": 5.2}
    assert settings.render.max_grace_seconds == 900
    assert settings.reward_error_ratio_max == 0.25
    assert settings.render.reward_image == "registry.example/reward@sha256:" + "c" * 64
    assert settings.metrics_port == 9100
    [service] = by_kind(text, "Service")
    assert service["spec"]["ports"][0]["port"] == 9100


def test_the_operator_watches_every_namespace_or_exactly_the_ones_listed() -> None:
    assert "--all-namespaces" in _container(template())["args"]
    args = _container(template("watchNamespaces={team-a,team-b}"))["args"]
    assert [a for a in args if a.startswith("--namespace")] == ["--namespace=team-a", "--namespace=team-b"]
    assert "--all-namespaces" not in args


def test_watching_namespaces_grants_nothing_cluster_wide_but_reading_runtimes() -> None:
    text = template("watchNamespaces={team-a,team-b}")
    docs = documents(text)
    # GRPORuntimes are cluster-scoped: a Role cannot grant them, so their read is the one cluster-wide grant, and
    # what `grpo doctor` checks the operator's account for (CLUSTER_RULES).
    assert _rules(text, "ClusterRole") == {("grpo.dev", "grporuntimes"): {"get", "list", "watch"}}
    assert _rules(text, "ClusterRole") == {(r.group, res): set(r.verbs) for r in CLUSTER_RULES for res in r.resources}
    assert [d["roleRef"]["name"] for d in docs if d["kind"] == "ClusterRoleBinding"] == [
        d["metadata"]["name"] for d in docs if d["kind"] == "ClusterRole"
    ]
    roles = {d["metadata"]["namespace"] for d in docs if d["kind"] == "Role" and not _status_key(d)}
    bindings = {d["metadata"]["namespace"] for d in docs if d["kind"] == "RoleBinding" and not _status_key(d)}
    assert roles == bindings == {"team-a", "team-b"}


def _status_key(doc: dict[str, Any]) -> bool:
    """The Role (or its binding) of the operator's status key Secret, in the release's namespace."""
    return str(doc["metadata"]["name"]).endswith("-status-key")


@pytest.mark.parametrize("values", [(), ("watchNamespaces={team-a}",)], ids=["every namespace", "one namespace"])
def test_the_status_key_is_the_operators_alone_read_by_name_in_its_own_namespace(values: tuple[str, ...]) -> None:
    """The key that seals status.runtime: the operator's ServiceAccount may get that one Secret (and create it once)
    in the release's namespace; every subject the chart binds anything to is that ServiceAccount, so the chart grants
    no one else grporuns/status (which would let them rewrite the copy) or the key."""
    text = template(*values)
    [role] = [r for r in by_kind(text, "Role") if _status_key(r)]
    [binding] = [b for b in by_kind(text, "RoleBinding") if _status_key(b)]
    env = {e["name"]: e.get("value") for e in _container(text)["env"]}
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == env["GRPO_OPERATOR_NAMESPACE"]
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": [env["GRPO_STATUS_KEY_SECRET"]],
            "verbs": ["get"],
        },
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
    ]
    [account] = by_kind(text, "ServiceAccount")
    operator = {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "grpo-system"}
    for kind in ("RoleBinding", "ClusterRoleBinding"):
        for bound in by_kind(text, kind):
            assert bound["subjects"] == [operator], bound["metadata"]["name"]
    load_settings({k: v for k, v in env.items() if k in ("GRPO_STATUS_KEY_SECRET", "GRPO_OPERATOR_NAMESPACE")})


def _rules(text: str, kind: str) -> dict[tuple[str, str], set[str]]:
    granted: dict[tuple[str, str], set[str]] = {}
    for role in by_kind(text, kind):
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    granted.setdefault((group, resource), set()).update(rule["verbs"])
    return granted


PLURAL = {
    "ConfigMap": "configmaps",
    "Service": "services",
    "Deployment": "deployments",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "RayCluster": "rayclusters",
    "NetworkPolicy": "networkpolicies",
}


@pytest.mark.parametrize(
    ("values", "kind"),
    [((), "ClusterRole"), (("watchNamespaces={team-a}",), "Role")],
    ids=["every namespace", "one namespace"],
)
def test_the_rules_grant_create_and_patch_on_every_kind_the_operator_renders(
    values: tuple[str, ...], kind: str
) -> None:
    doc = yaml.safe_load((EXAMPLES / "quickstart.yaml").read_text())
    doc = merge(
        doc, {"spec": {"reward": {"type": "remote", "remote": {"replicas": 2, "image": "r@sha256:" + "d" * 64}}}}
    )
    run, problems = parse_run(doc)
    assert run is not None and not problems
    children = render(run, make_plan(run), RenderSettings()).children
    rendered_kinds = {(c["apiVersion"].rpartition("/")[0], c["kind"]) for c in children}
    assert {k for _, k in rendered_kinds} == set(PLURAL)  # a new child kind must be added here and to the chart
    granted = _rules(template(*values), kind)
    for group, child_kind in rendered_kinds:
        # server-side apply is a PATCH; when the object does not exist yet the API server also checks create
        assert {"create", "patch"} <= granted.get((group, PLURAL[child_kind]), set()), child_kind


def test_no_rule_uses_a_wildcard_and_secrets_are_only_read_by_name_and_created() -> None:
    for kind in ("ClusterRole", "Role"):
        granted = _rules(template("watchNamespaces={team-a}") if kind == "Role" else template(), kind)
        assert granted, kind
        for (group, resource), verbs in granted.items():
            assert "*" not in (group, resource) and "*" not in verbs
            assert resource not in {"namespaces", "nodes", "serviceaccounts"} and "escalate" not in verbs
        assert granted[("", "secrets")] == {"get", "create"}  # the run's Ray auth token; never list or watch


def test_turning_network_policies_off_drops_their_rule_and_tells_the_operator() -> None:
    [deployment] = by_kind(template("networkPolicies.enabled=false"), "Deployment")
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GRPO_NETWORK_POLICIES"] == "false"
    assert ("networking.k8s.io", "networkpolicies") not in _rules(
        template("networkPolicies.enabled=false"), "ClusterRole"
    )
    assert ("networking.k8s.io", "networkpolicies") in _rules(template(), "ClusterRole")


def test_the_operator_pod_is_non_root_read_only_and_drops_every_capability() -> None:
    [deployment] = by_kind(template(), "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = _container(template())
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    # the probes hit the port kopf's --liveness endpoint listens on
    liveness = next(a for a in container["args"] if a.startswith("--liveness="))
    port = int(re.search(r":(\d+)/healthz$", liveness).group(1))  # type: ignore[union-attr]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert ports[container[probe]["httpGet"]["port"]] == port and container[probe]["httpGet"]["path"] == "/healthz"
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] == "Recreate"
    assert "--standalone" in container["args"]


def test_the_chart_ships_the_generated_crd() -> None:
    assert (CHART / "crds" / "grporuns.grpo.dev.yaml").read_text() == (
        REPO / "crds" / "grporuns.grpo.dev.yaml"
    ).read_text()


def test_the_image_is_pinned_by_digest_and_runs_as_non_root() -> None:
    dockerfile = (REPO / "operator" / "Dockerfile").read_text()
    base = re.search(r"^ARG BASE=(\S+)$", dockerfile, re.MULTILINE)
    assert base and re.fullmatch(r"python:3\.11-slim@sha256:[0-9a-f]{64}", base.group(1))
    assert re.findall(r"^FROM (\S+)", dockerfile, re.MULTILINE) == ["${BASE}", "${BASE}"]
    users = re.findall(r"^USER (\d+):(\d+)$", dockerfile, re.MULTILINE)
    assert users and all(int(u) != 0 for pair in users for u in pair)
    [deployment] = by_kind(template(), "Deployment")
    assert str(deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"]) == users[-1][0]
    # the build context is the repository root; only what `pip install .` needs gets in
    ignore = [line for line in (REPO / ".dockerignore").read_text().splitlines() if line and not line.startswith("#")]
    assert ignore[0] == "*" and {"!pyproject.toml", "!README.md", "!operator/grpo_operator"} <= set(ignore)


def test_the_network_policy_values_reach_the_operator_as_its_settings() -> None:
    text = template(
        "networkPolicies.prometheus.namespaceLabels.team=observability",
        "networkPolicies.prometheus.podLabels.app=prometheus",
        "networkPolicies.restrictEgress=true",
        "networkPolicies.egressCIDRs={10.1.0.0/16}",
        namespace="ops",
    )
    render_settings = load_settings({e["name"]: e["value"] for e in _container(text)["env"]}).render
    assert render_settings.network_policies is True
    assert render_settings.operator_namespace == "ops"
    assert render_settings.operator_pod_labels == {
        "app.kubernetes.io/name": "grpo-operator",
        "app.kubernetes.io/instance": "grpo",
    }
    assert render_settings.prometheus_namespace_labels == {"team": "observability"}
    assert render_settings.prometheus_pod_labels == {"app": "prometheus"}
    assert render_settings.egress_cidrs == ("10.1.0.0/16",)
    default = load_settings({e["name"]: e["value"] for e in _container(template())["env"]}).render
    assert default.prometheus_pod_labels is None and default.egress_cidrs is None


@pytest.mark.parametrize(
    ("namespaces", "peering_kind", "resource"),
    [
        ((), "ClusterKopfPeering", "clusterkopfpeerings"),
        (("team-a", "team-b"), "KopfPeering", "kopfpeerings"),
    ],
    ids=["every namespace", "two namespaces"],
)
def test_two_replicas_run_with_kopf_peering_its_object_and_the_rights_for_it(
    namespaces: tuple[str, ...], peering_kind: str, resource: str
) -> None:
    values = ["replicas=2", "peering.lifetimeSeconds=20"]
    if namespaces:
        values.append("watchNamespaces={" + ",".join(namespaces) + "}")
    text = template(*values)
    [deployment] = by_kind(text, "Deployment")
    container = _container(text)
    assert deployment["spec"]["replicas"] == 2 and deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    assert "--peering=grpo-operator" in container["args"] and "--standalone" not in container["args"]
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"  # kopf's replica identity
    assert env["GRPO_PEERING_LIFETIME_SECONDS"]["value"] == "20"
    peerings = by_kind(text, peering_kind)
    assert [p["metadata"]["name"] for p in peerings] == ["grpo-operator"] * max(1, len(namespaces))
    assert sorted(p["metadata"].get("namespace", "") for p in peerings) == sorted(namespaces or ("",))
    roles = [
        r
        for r in by_kind(text, "Role" if namespaces else "ClusterRole")
        if "-runtimes" not in r["metadata"]["name"] and not _status_key(r)
    ]
    assert roles
    for role in roles:
        rule = next(r for r in role["rules"] if "kopf.dev" in r["apiGroups"])
        assert rule["resources"] == [resource] and set(rule["verbs"]) == {"get", "list", "watch", "patch"}
    crds = yaml.safe_load_all((CHART / "crds" / "kopfpeerings.kopf.dev.yaml").read_text())
    assert {c["metadata"]["name"] for c in crds} == {"kopfpeerings.kopf.dev", "clusterkopfpeerings.kopf.dev"}
    load_settings({"GRPO_PEERING_LIFETIME_SECONDS": env["GRPO_PEERING_LIFETIME_SECONDS"]["value"]})  # a valid setting


def test_the_default_runtime_is_installed_only_when_asked_and_is_the_built_in_table() -> None:
    """GRPORuntimes are cluster-wide: a default one in every release would make a second release in the cluster
    fail to install. Asked for, it is the operator's own AWS table, kept on uninstall for the platform team."""
    assert by_kind(template(), "GRPORuntime") == []
    [runtime] = by_kind(template("defaultRuntime.install=true"), "GRPORuntime")
    assert runtime["metadata"]["name"] == "default"
    assert runtime["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    parsed, problems = parse_runtime(runtime)
    assert not problems and parsed is not None
    assert parsed.spec == DEFAULT_RUNTIME.spec
