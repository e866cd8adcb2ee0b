"""The local Ray head: runs jobs that need `gpu_node`, listens on loopback only, and leaves no process behind
when its owner exits normally, on an exception, on Ctrl-C or SIGTERM, or is SIGKILLed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from grpo_dev.localray import LocalRayHead
from ray.job_submission import JobStatus, JobSubmissionClient

from tests.support.operator_harness import wait_for

GPU_NODE = {"gpu_node": 0.001}
TERMINAL = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}


def live_processes_mentioning(*needles: str) -> list[str]:
    """`ps` lines (zombies excluded) whose command line contains any needle."""
    ps = subprocess.run(["ps", "-ww", "-eo", "pid=,stat=,args="], capture_output=True, text=True, check=True).stdout
    lines = []
    for line in ps.splitlines():
        pid, stat, args = [*line.split(None, 2), "", ""][:3]
        if int(pid) != os.getpid() and not stat.startswith("Z") and any(n in args for n in needles):
            lines.append(line)
    return lines


def listening_addresses(pids: list[int]) -> set[str]:
    """Local addresses of the TCP sockets in LISTEN state owned by `pids`, as `ip:port`."""
    inodes = set()
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A = LISTEN
                continue
            hex_ip, hex_port = local.split(":")
            raw = bytes.fromhex(hex_ip)
            if len(raw) == 4:
                ip = ".".join(str(b) for b in raw[::-1])
            else:  # four little-endian 32-bit words
                words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
                ip = words.hex()
                if ip.startswith("00000000000000000000ffff"):
                    ip = ".".join(str(b) for b in words[12:])
            found.add(f"{ip}:{int(hex_port, 16)}")
    return found


def run_to_end(client: JobSubmissionClient, entrypoint: str, **kwargs) -> str:  # type: ignore[no-untyped-def]
    job = client.submit_job(entrypoint=entrypoint, **kwargs)
    wait_for(f"job {job} to finish", lambda: client.get_job_status(job) in TERMINAL)
    return job


def test_head_runs_a_job_that_needs_the_gpu_node_resource_and_advertises_no_real_gpu(ray_head: LocalRayHead) -> None:
    client = JobSubmissionClient(ray_head.dashboard_url, headers=ray_head.auth_headers)
    probe = "import json, ray; ray.init(); print('RESOURCES', json.dumps(ray.cluster_resources()))"
    job = run_to_end(client, f"{sys.executable} -c {json.dumps(probe)}", entrypoint_resources=GPU_NODE)
    assert client.get_job_status(job) == JobStatus.SUCCEEDED, client.get_job_logs(job)
    line = next(ln for ln in client.get_job_logs(job).splitlines() if ln.startswith("RESOURCES "))
    resources = json.loads(line.removeprefix("RESOURCES "))
    assert resources["gpu_node"] == 1.0
    assert resources["CPU"] == 8.0
    assert "GPU" not in resources
    info = client.get_job_info(job)
    assert info.driver_info is not None and info.driver_info.node_ip_address == "127.0.0.1"


def test_every_port_of_the_head_listens_on_loopback_only(ray_head: LocalRayHead) -> None:
    addresses = listening_addresses(ray_head.pids())
    ports = {int(a.rsplit(":", 1)[1]) for a in addresses}
    assert {ray_head.ports.gcs, ray_head.ports.dashboard} <= ports
    assert ray_head.dashboard_url == f"http://127.0.0.1:{ray_head.ports.dashboard}"
    assert ray_head.gcs_address == f"127.0.0.1:{ray_head.ports.gcs}"
    assert all(a.startswith("127.0.0.1:") for a in addresses), sorted(addresses)


def test_leaving_the_with_block_on_an_exception_stops_the_head_and_its_running_job() -> None:
    token = f"localray-test-{uuid.uuid4().hex}"
    holder: dict[str, Path] = {}
    with pytest.raises(RuntimeError, match="boom"), LocalRayHead(num_cpus=2) as head:
        holder["temp_dir"] = head.temp_dir
        client = JobSubmissionClient(head.dashboard_url, headers=head.auth_headers)
        job = client.submit_job(
            entrypoint=f"{sys.executable} -c 'import time; time.sleep(600)' {token}", entrypoint_resources=GPU_NODE
        )
        wait_for("the job to run", lambda: client.get_job_status(job) == JobStatus.RUNNING)
        wait_for("the job's process", lambda: live_processes_mentioning(token))
        raise RuntimeError("boom")
    temp_dir = str(holder["temp_dir"])
    assert live_processes_mentioning(temp_dir, token) == []
    assert not Path(temp_dir).exists()


@contextmanager
def up_cli_with_a_running_job() -> Iterator[tuple[subprocess.Popen[str], str, str]]:
    """`python -m grpo_dev.localray up` with a running job: yields the process, its temp dir, the job token."""
    up = subprocess.Popen(
        [sys.executable, "-m", "grpo_dev.localray", "up", "--num-cpus", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert up.stdout is not None and up.stderr is not None
        url = up.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), (url, up.stderr.read() if up.poll() is not None else "")
        temp_dir = up.stderr.readline().split("temp dir ", 1)[1].split(")", 1)[0]
        token_file = up.stderr.readline().strip().split("RAY_AUTH_TOKEN_PATH=", 1)[1]
        token = f"localray-test-{uuid.uuid4().hex}"
        client = JobSubmissionClient(url, headers={"Authorization": f"Bearer {Path(token_file).read_text()}"})
        job = client.submit_job(
            entrypoint=f"{sys.executable} -c 'import time; time.sleep(600)' {token}", entrypoint_resources=GPU_NODE
        )
        wait_for("the job to run", lambda: client.get_job_status(job) == JobStatus.RUNNING)
        wait_for("the job's process", lambda: live_processes_mentioning(token))
        yield up, temp_dir, token
    finally:
        if up.poll() is None:  # the test failed early: stop it the normal way
            up.terminate()
            up.wait(timeout=60)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_up_cli_stops_everything_on_ctrl_c_or_sigterm(sig: signal.Signals) -> None:
    with up_cli_with_a_running_job() as (up, temp_dir, token):
        assert live_processes_mentioning(temp_dir)
        up.send_signal(sig)
        assert up.wait(timeout=120) in (0, 128 + sig)
    assert live_processes_mentioning(temp_dir, token) == []
    assert not Path(temp_dir).exists()


def test_a_sigkilled_owner_still_leaves_no_ray_process_behind() -> None:
    with up_cli_with_a_running_job() as (up, temp_dir, token):
        up.kill()
        up.wait(timeout=30)
    wait_for("the reaper to clean up", lambda: not live_processes_mentioning(temp_dir, token))
    wait_for("the temp dir to go", lambda: not Path(temp_dir).exists())


def test_a_head_started_without_a_with_block_is_stopped_at_interpreter_exit() -> None:
    script = "from grpo_dev.localray import LocalRayHead; print(LocalRayHead(num_cpus=1).start().temp_dir)"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    temp_dir = done.stdout.strip()
    assert temp_dir.startswith("/tmp/rh-")
    assert live_processes_mentioning(temp_dir) == []
    assert not Path(temp_dir).exists()
