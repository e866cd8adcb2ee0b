"""The miles double's `--fake-hang-frames`, for the real-node evidence test: at its stall the driver waits in
`fake_driver_waits_in_rollout` and leaves a stand-in flight-recorder dump where torch would write rank 0's; the
actor's scheduler stand-in waits in `fake_scheduler_waits_for_batch` and goes with its parent; the actor goes to a
node other than the driver's when there is one. Stacks are read the way the operator reads them (the image's hook,
grpo_launcher.stacks), without Ray: the actor itself is the real-node test's."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from grpo_dev import fake_miles
from grpo_launcher import stackdump, stacks

pytestmark = pytest.mark.skipif(stackdump.SIGNAL is None, reason="no real-time signals on this platform")

SRC = str(Path(stackdump.__file__).resolve().parents[1])


@pytest.fixture
def hooked_env(tmp_path: Path) -> Iterator[tuple[dict[str, str], Path]]:
    """The environment of a Ray pod's process: the hook's `.pth` on a site dir a `sitecustomize` adds."""
    site_dir, custom = tmp_path / "site", tmp_path / "custom"
    site_dir.mkdir()
    custom.mkdir()
    stackdump.install_pth(site_dir)
    (custom / "sitecustomize.py").write_text(f"import site\nsite.addsitedir({str(site_dir)!r})\n")
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", stackdump.ENV)}
    env["PYTHONPATH"] = os.pathsep.join([str(custom), SRC, env.get("PYTHONPATH", "")])
    env[stackdump.ENV] = str(tmp_path / "stacks")
    env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] = str(tmp_path / "stacks" / "nccl_trace_rank_")
    yield env, tmp_path / "stacks"


def test_at_the_stall_the_driver_waits_in_its_named_frame_and_leaves_a_flight_recorder_standin(
    hooked_env: tuple[dict[str, str], Path],
) -> None:
    env, directory = hooked_env
    argv = [sys.executable, fake_miles.__file__, "--num-rollout", "5", "--fake-step-seconds", "0.01"]
    driver = subprocess.Popen(
        [*argv, "--fake-stall-after", "1", "--fake-hang-frames"], env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        assert driver.stderr is not None
        for line in driver.stderr:  # the stand-in is written before the driver says it waits
            if "the driver waits in fake_driver_waits_in_rollout" in line:
                break
        dumps = {d["pid"]: d["dump"] for d in stacks.dump_stacks(directory, wait_seconds=30)}
        assert "fake_driver_waits_in_rollout" in dumps[driver.pid]
        assert (directory / "nccl_trace_rank_0").read_bytes().startswith(b"\x80")  # a pickle, as torch writes
        assert list(stacks.nccl_traces(directory)) == ["nccl_trace_rank_0"]
    finally:
        driver.terminate()
        assert driver.wait(timeout=30) == 143  # SIGTERM still ends the stalled double at once


def test_without_the_knob_a_stall_writes_no_flight_recorder_standin(hooked_env: tuple[dict[str, str], Path]) -> None:
    env, directory = hooked_env
    argv = [sys.executable, fake_miles.__file__, "--num-rollout", "5", "--fake-step-seconds", "0.01"]
    driver = subprocess.Popen([*argv, "--fake-stall-after", "1"], env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert driver.stderr is not None
        for line in driver.stderr:
            if "stalled before rollout 1" in line:
                break
        time.sleep(0.5)
        assert not (directory / "nccl_trace_rank_0").exists()
    finally:
        driver.terminate()
        driver.wait(timeout=30)


def test_the_scheduler_standin_waits_in_its_named_frame_and_goes_with_its_parent(
    hooked_env: tuple[dict[str, str], Path],
) -> None:
    env, directory = hooked_env
    parent_code = "from grpo_dev import fake_miles; c = fake_miles.spawn_scheduler(); print(c.pid, flush=True); input()"
    env["PYTHONPATH"] += os.pathsep + str(Path(fake_miles.__file__).parents[1])
    parent = subprocess.Popen(
        [sys.executable, "-c", parent_code], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None and parent.stdin is not None
    scheduler = int(parent.stdout.readline())
    dumps = {d["pid"]: d["dump"] for d in stacks.dump_stacks(directory, wait_seconds=30)}
    assert "fake_scheduler_waits_for_batch" in dumps[scheduler]
    parent.kill()
    parent.wait(timeout=30)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{scheduler}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)  # not our child: whoever adopted it reaps it
    assert not Path(f"/proc/{scheduler}").exists() or "Z" in Path(f"/proc/{scheduler}/stat").read_text().split()[2]


@pytest.mark.parametrize(
    ("nodes", "driver", "chosen"),
    [
        ([{"NodeID": "a", "Alive": True}, {"NodeID": "b", "Alive": True}], "a", "b"),
        ([{"NodeID": "a", "Alive": True}, {"NodeID": "b", "Alive": False}], "a", None),
        ([{"NodeID": "a", "Alive": True}], "a", None),
    ],
    ids=["another node alive", "the other node dead", "the driver's node alone"],
)
def test_the_actor_goes_to_an_alive_node_other_than_the_drivers_when_there_is_one(
    nodes: list[dict[str, object]], driver: str, chosen: str | None
) -> None:
    assert fake_miles.other_node(nodes, driver) == chosen
