"""`grpo doctor` where the cluster cannot be read at all: one line naming what is wrong and the fix, exit status 1,
never a traceback."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

from tests.support.builders import EXAMPLES
from tests.support.cli import GRPO


def _doctor(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"} | {"HOME": str(home)}
    return subprocess.run([*GRPO, "doctor", *args], check=False, capture_output=True, text=True, timeout=60, env=env)


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and result.stdout == "", result
    return lines[0]


def test_no_kubeconfig_is_one_line_naming_where_it_looked_and_the_flag(tmp_path: Path) -> None:
    line = _one_line(_doctor(home=tmp_path))
    assert line.startswith("grpo doctor: no usable kubeconfig ($KUBECONFIG or ~/.kube/config)")
    assert line.endswith("pass --kubeconfig FILE or set KUBECONFIG")
    line = _one_line(_doctor("--kubeconfig", str(tmp_path / "missing"), home=tmp_path))
    assert f"no usable kubeconfig ({tmp_path / 'missing'})" in line


def test_an_unreachable_api_server_is_one_line_naming_its_address(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nothing listens on: bound, never listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
            f"clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{port}', insecure-skip-tls-verify: true}}}}]\n"
            "users: [{name: u, user: {token: t}}]\n"
            "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
        )
        line = _one_line(_doctor("--kubeconfig", str(kubeconfig), home=tmp_path))
    assert line.startswith(f"grpo doctor: cannot reach the API server at https://127.0.0.1:{port}: ")
    assert line.endswith("check that the cluster is up and the kubeconfig's server address")


def test_a_run_file_with_problems_is_refused_with_its_problems_whatever_the_cluster(tmp_path: Path) -> None:
    bad = tmp_path / "run.yaml"
    bad.write_text("apiVersion: grpo.dev/v1alpha1\nkind: GRPORun\nmetadata: {name: x}\nspec: {}\n")
    result = _doctor("-f", str(bad), home=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "spec.model" in result.stdout and "kubeconfig" not in result.stderr


def test_a_run_on_a_platform_runtime_takes_the_runtime_from_the_cluster_or_from_runtime(tmp_path: Path) -> None:
    run, runtime = str(EXAMPLES / "runtimes" / "quickstart.yaml"), str(EXAMPLES / "runtimes" / "h100-infiniband.yaml")
    # The run is valid with its runtime: what stops doctor is the missing cluster, not the run or the flag.
    for args in (("-f", run), ("-f", run, "--runtime", runtime)):
        line = _one_line(_doctor(*args, home=tmp_path))
        assert line.startswith("grpo doctor: no usable kubeconfig"), (args, line)
    line = _one_line(_doctor("-f", run, "--runtime", str(tmp_path / "missing.yaml"), home=tmp_path))
    assert line.startswith(f"{tmp_path / 'missing.yaml'}: cannot read"), line


def test_a_chart_values_file_that_cannot_be_read_is_one_line_before_the_cluster_is_read(tmp_path: Path) -> None:
    line = _one_line(_doctor("--values", str(tmp_path / "missing.yaml"), home=tmp_path))
    assert line.startswith(f"grpo doctor: --values {tmp_path / 'missing.yaml'}: cannot read it (")
    assert line.endswith("pass the values file given to helm install")
    listed = tmp_path / "values.yaml"
    listed.write_text("- metrics\n- serviceMonitor\n")
    line = _one_line(_doctor("--values", str(listed), home=tmp_path))
    assert (
        line
        == f"grpo doctor: --values {listed}: not a mapping of chart values; pass the values file given to helm install"
    )
