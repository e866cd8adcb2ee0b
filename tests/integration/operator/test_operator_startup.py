"""The operator's start-up under a setting it cannot honour: it stops at once with one line naming it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import pytest
from grpo_dev.localcluster import ControlPlane

pytestmark = pytest.mark.integration


def test_a_metrics_port_already_taken_stops_the_operator_with_one_line(control_plane: ControlPlane) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("0.0.0.0", 0))  # where the operator's metrics server listens
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "KUBECONFIG": str(control_plane.kubeconfig), "GRPO_METRICS_PORT": str(port)}
        process = subprocess.Popen(
            [sys.executable, "-m", "grpo_operator", "--standalone", "--namespace", "default"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = process.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
            pytest.fail(f"the operator kept running without its metrics port: {err[-1500:]}")
    assert process.returncode == 2
    lines = (out + err).strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, lines[:5]
    assert f"GRPO_METRICS_PORT={port}" in lines[0] and "cannot listen" in lines[0]
