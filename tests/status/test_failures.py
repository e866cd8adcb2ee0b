"""A failed job's log says which class of failure ended it: each class from real lines of the pinned sources
(docs/integrations/failures.md says where each line comes from), the most specific cause of a cascade wins, and
the class is the run's `Failed` reason."""

from __future__ import annotations

import pytest
from grpo_operator.api.status import FAILURE_CLASSES, Phase, Reason
from grpo_operator.status.completion import job_failure
from grpo_operator.status.failures import RETRYABLE, SIGNATURES, classify
from grpo_operator.status.observation import JobState

from tests.support.status import CUDA_OOM, ECC, NODE_DEAD, READY, REMOTE_ERROR, WATCHDOG, at, intent, job, run_through

R = Reason
ILLEGAL_ADDRESS = (
    "(MegatronTrainRayActor pid=4715, ip=10.0.1.9) RuntimeError: CUDA error: an illegal memory access was encountered"
)

# One real line per signature: (the line, the class, the node it names).
LINES = [
    (CUDA_OOM, R.CUDA_OUT_OF_MEMORY, "10.0.1.8"),
    ("RuntimeError: CUDA error: out of memory", R.CUDA_OUT_OF_MEMORY, None),
    (
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
        R.HOST_OUT_OF_MEMORY,
        None,
    ),
    (
        "(raylet, ip=10.0.1.9) [2026-12-01 10:00:00] 1 worker(s) were killed due to the node running low on memory.",
        R.HOST_OUT_OF_MEMORY,
        "10.0.1.9",
    ),
    (
        "(MegatronTrainRayActor pid=4713, ip=10.0.1.9) OSError: [Errno 28] No space left on device",
        R.CHECKPOINT_WRITE_FAILED,
        "10.0.1.9",
    ),
    ("FileNotFoundError: Prompt dataset path '/data/dapo.jsonl' does not exist.", R.INPUT_ERROR, None),
    (
        "ValueError: Unsupported file format: /data/dapo.csv. Supported formats are .jsonl and .parquet.",
        R.INPUT_ERROR,
        None,
    ),
    (
        "ValueError: Unsupported content type: <class 'int'>, expected str or list of dicts",
        R.INPUT_ERROR,
        None,
    ),
    (
        'GRPO_FAILURE {"reason": "RewardServiceFailed", "message": "503 for 600 s"}',
        R.REWARD_SERVICE_FAILED,
        None,
    ),
    (
        '  File "/root/miles/miles/rollout/rm_hub/__init__.py", line 27, in remote_rm',
        R.REWARD_SERVICE_FAILED,
        None,
    ),
    (
        "The node with node id: 5e1f and address: 10.0.1.7 and node name: 10.0.1.7 has been marked dead because"
        " the detector has missed too many heartbeats from it.",
        R.NODE_LOST,
        None,
    ),
    ("The actor died because its node has died. Node Id: 5e1f", R.NODE_LOST, None),
    (WATCHDOG, R.NCCL_TIMEOUT, "10.0.1.7"),
    (
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3353, remote process exited or"
        " there was a network error, NCCL version 2.28.9",
        R.FABRIC_ERROR,
        None,
    ),
    (
        "node-7:412:901 [3] NCCL WARN NET/IB: Got completion from peer 10.0.1.8<41234> with status=12"
        " opcode=1 reqSize=524288 vendor_err=129 req_type=Send localGid ::ffff:10.0.1.7 hca mlx5_3",
        R.FABRIC_ERROR,
        None,
    ),
    (
        "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:3353, unhandled system error (run with NCCL_DEBUG=INFO"
        " for details), NCCL version 2.28.9",
        R.FABRIC_ERROR,
        None,
    ),
    (
        "(RolloutManager pid=900, ip=10.0.1.10) Health check failed for rollout engine 2 (ray timeout or error)."
        " Killing actor. Exception: GetTimeoutError",
        R.ROLLOUT_ENGINE_DIED,
        "10.0.1.10",
    ),
    ("\tclass_name: SGLangEngine", R.ROLLOUT_ENGINE_DIED, None),
    (
        "[2026-12-01 10:00:00] Received sigquit from a child process. It usually means the child failed.",
        R.ROLLOUT_ENGINE_DIED,
        None,
    ),
    (ECC, R.GPU_HARDWARE_ERROR, "10.0.1.9"),
    (
        "node-9:77:81 [2] NCCL WARN Cuda failure 'uncorrectable NVLink error detected during the execution'",
        R.GPU_HARDWARE_ERROR,
        None,
    ),
    (
        "(SGLangEngine pid=951) cuLaunchKernel failed: <CUresult.CUDA_ERROR_ECC_UNCORRECTABLE: 214>",
        R.GPU_HARDWARE_ERROR,
        None,
    ),
    (ILLEGAL_ADDRESS, R.CUDA_KERNEL_ERROR, "10.0.1.9"),
    ("RuntimeError: CUDA error: unspecified launch failure", R.CUDA_KERNEL_ERROR, None),
    ("torch.AcceleratorError: CUDA error: device-side assert triggered", R.CUDA_KERNEL_ERROR, None),
    ("RuntimeError: CUDA error: misaligned address", R.CUDA_KERNEL_ERROR, None),
    ("RuntimeError: CUDA error: hardware stack error", R.CUDA_KERNEL_ERROR, None),
    ("Triton Error [CUDA]: an illegal instruction was encountered", R.CUDA_KERNEL_ERROR, None),
]


@pytest.mark.parametrize(("line", "reason", "node"), LINES, ids=[f"{reason}: {line[:60]}" for line, reason, _ in LINES])
def test_each_failure_class_is_recognized_from_its_real_line(line: str, reason: Reason, node: str | None) -> None:
    log = f"rollout 11: {{...}}\nsomething else\n{line}\nTraceback follows\n"
    found = classify(log)
    assert found is not None and (found.reason, found.node) == (reason, node)
    assert found.line == line.strip()


def test_every_failure_class_has_a_signature_and_a_real_line() -> None:
    assert {s.reason for s in SIGNATURES} == set(FAILURE_CLASSES) == {r for _, r, _ in LINES}


@pytest.mark.parametrize(
    "chatter",
    [
        "node-7:412:412 [0] NCCL INFO NET/OFI Selected Provider is efa",
        "node-7:412:412 [0] NCCL WARN Call to bind failed: Address already in use",
        "rollout 3: {'rollout/raw_reward': 0.5}",
        "[Rank 0] ProcessGroupNCCL initialization options: TIMEOUT(ms): 1800000",
        "Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 chars):",
    ],
)
def test_healthy_chatter_is_no_failure_class(chatter: str) -> None:
    assert classify(chatter) is None


def test_a_cascade_is_named_by_its_cause_not_its_consequences() -> None:
    # one rank ran out of GPU memory; its peers then time out in the all-reduce and the engines lose them
    log = "\n".join(["rollout 4: {...}", CUDA_OOM, WATCHDOG, "\tclass_name: SGLangEngine"])
    found = classify(log)
    assert found is not None and found.reason is R.CUDA_OUT_OF_MEMORY and not found.retryable


def test_the_nccl_timeout_says_which_rank_waited_how_long_in_which_collective_on_which_node() -> None:
    found = classify(f"\x1b[36m{WATCHDOG[:46]}\x1b[0m{WATCHDOG[46:]}")  # Ray colours the prefix
    assert found is not None and found.retryable
    assert found.summary == "rank 3 on node 10.0.1.7 waited 1800 s in ALLREDUCE"
    assert found.message.startswith("rank 3 on node 10.0.1.7 waited 1800 s in ALLREDUCE: (MegatronTrainRayActor")


def test_only_infrastructure_classes_are_retryable() -> None:
    # HeadLost is observed (the head answers without the job: status/completion.py head_lost), not read from a log.
    infrastructure = {R.NCCL_TIMEOUT, R.FABRIC_ERROR, R.NODE_LOST, R.ROLLOUT_ENGINE_DIED, R.HOST_OUT_OF_MEMORY}
    assert infrastructure | {R.GPU_HARDWARE_ERROR, R.HEAD_LOST} == RETRYABLE
    assert R.INPUT_ERROR not in RETRYABLE and R.DEGENERATE_OUTPUT not in RETRYABLE
    assert R.CUDA_KERNEL_ERROR not in RETRYABLE  # a kernel's bug faults again on the same input


# (log lines in the order the driver printed them, the class the earliest gives). A cascade prints its cause first;
# before, the most specific class found anywhere won, so a consequence printed earlier could not lose to it and a
# class with no signature fell through to its peers' fabric lines.
EARLIEST = [
    pytest.param(
        [ILLEGAL_ADDRESS, REMOTE_ERROR.format(pid=4716, ip="10.0.1.7"), REMOTE_ERROR.format(pid=4717, ip="10.0.1.8")],
        R.CUDA_KERNEL_ERROR,
        id="a kernel fault on one rank, then its peers' remote errors: a kernel fault, never retried as fabric",
    ),
    pytest.param(
        [ECC, WATCHDOG, WATCHDOG.replace("pid=4711", "pid=4718")],
        R.GPU_HARDWARE_ERROR,
        id="an ECC error on one rank, then the others' watchdog timeouts: the GPU's hardware",
    ),
    pytest.param(
        [REMOTE_ERROR.format(pid=4716, ip="10.0.1.7"), WATCHDOG],
        R.FABRIC_ERROR,
        id="a remote error before a watchdog timeout: the fabric, not the timeout a later collective hit",
    ),
    pytest.param(
        ["\tclass_name: SGLangEngine", CUDA_OOM],
        R.ROLLOUT_ENGINE_DIED,
        id="a rollout engine's death printed before a GPU's out-of-memory: the death",
    ),
]


@pytest.mark.parametrize(("lines", "reason"), EARLIEST)
def test_the_earliest_line_that_shows_a_class_names_the_failure(lines: list[str], reason: Reason) -> None:
    found = classify("\n".join(["rollout 4: {...}", *lines, "Traceback (most recent call last):"]))
    assert found is not None and found.reason is reason and found.line == lines[0].strip()


def test_within_one_line_the_more_specific_class_wins() -> None:
    # NCCL's own CUDA failure, wrapped in torch's NCCL error on the same line: the GPU, not the fabric
    line = "RuntimeError: NCCL error in: x.cpp:1, unhandled system error, Cuda failure 'uncorrectable ECC error encountered'"
    found = classify(line)
    assert found is not None and found.reason is R.GPU_HARDWARE_ERROR


def test_a_very_long_line_is_cut_in_the_message() -> None:
    found = classify(WATCHDOG + " x" * 5000)
    assert found is not None and len(found.line) == 300


def test_the_failure_file_and_the_preflight_still_come_first() -> None:
    preflight = f"x\n{WATCHDOG}\npreflight failed: /fsx not mounted\n"
    assert job_failure(preflight, None, None)[0] == R.PREFLIGHT_FAILED
    unclassified = "Job entrypoint command failed with exit code 3\nboom"
    assert job_failure(unclassified, None, None) == (R.JOB_FAILED, "the Ray job failed with exit code 3: boom")


def test_a_job_failure_with_an_nccl_timeout_line_ends_failed_with_that_class() -> None:
    message = f"Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 chars):\n{WATCHDOG}\nRuntimeError: boom"
    d = run_through(intent(), at(cluster=READY, job=job(JobState.FAILED, message)))
    assert (d.status.phase, d.status.reason) == (Phase.FAILED, "NCCLTimeout")
    assert d.status.message is not None
    assert d.status.message.startswith("rank 3 on node 10.0.1.7 waited 1800 s in ALLREDUCE: ")


def test_the_whole_kept_log_tail_is_read_not_only_the_tail_ray_put_in_the_message() -> None:
    message = "Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 chars):\nboom"
    log_text = f"{CUDA_OOM}\n" + "filler\n" * 5000 + "boom\n"
    d = run_through(intent(), at(cluster=READY, job=job(JobState.FAILED, message), log_text=log_text))
    assert d.status.reason == "CUDAOutOfMemory"


def _watchdog(pid: int, ip: str | None) -> str:
    where = f"pid={pid}, ip={ip}" if ip else f"pid={pid}"  # Ray leaves out ip= for a process on the driver's node
    return WATCHDOG.replace("pid=4711, ip=10.0.1.7", where)


# (the log's lines, the driver's node, the node blamed, why). Before, the node of the first matching line was blamed,
# whoever printed it.
BLAME = [
    pytest.param([ECC, WATCHDOG], None, "10.0.1.9", "its own process", id="a rank's own ECC error blames its node"),
    pytest.param(
        [ECC.replace(", ip=10.0.1.9", ""), WATCHDOG],
        "10.0.1.5",
        "10.0.1.5",
        "its own process",
        id="an ECC error of a process on the driver's node (no ip=) blames the driver's node",
    ),
    pytest.param(
        [REMOTE_ERROR.format(pid=4716, ip="10.0.1.7")],
        None,
        None,
        "",
        id="a peer's remote error blames no node",
    ),
    pytest.param(
        [
            "(MegatronTrainRayActor pid=4716, ip=10.0.1.7) NCCL WARN NET/IB: Got completion from peer 10.0.1.8<1> with status=12"
        ],
        None,
        None,
        "",
        id="an IB completion error names a peer, not a culprit",
    ),
    pytest.param(
        [_watchdog(1, "10.0.1.7"), _watchdog(2, "10.0.1.8"), _watchdog(3, "10.0.1.7"), _watchdog(4, "10.0.1.8")],
        None,
        None,
        "",
        id="every rank's watchdog over two nodes: no majority, no node",
    ),
    pytest.param(
        [_watchdog(1, "10.0.1.7"), _watchdog(2, "10.0.1.8"), _watchdog(3, "10.0.1.8"), _watchdog(4, "10.0.1.8")],
        None,
        "10.0.1.8",
        "3 of the 4 processes whose NCCL watchdog timed out ran there",
        id="three of four timed-out processes on one node blame it, not the first line's",
    ),
    pytest.param(
        [_watchdog(1, None), _watchdog(2, None), _watchdog(3, "10.0.1.8")],
        "10.0.1.5",
        "10.0.1.5",
        "2 of the 3 processes",
        id="timed-out processes on the driver's node are counted on it",
    ),
    pytest.param([WATCHDOG], None, None, "", id="a lone watchdog line is the first waiter, not a majority"),
    pytest.param(
        [_watchdog(1, "10.0.1.7"), _watchdog(1, "10.0.1.7"), _watchdog(2, "10.0.1.8")],
        None,
        None,
        "",
        id="a process's second watchdog line (another process group) counts once",
    ),
    pytest.param(
        [NODE_DEAD], None, "10.0.1.8", "Ray marked it dead", id="the node Ray marked dead is blamed by its address"
    ),
    pytest.param(
        ["(RolloutManager pid=900, ip=10.0.1.10) The actor died because its node has died. Node Id: 5e1f"],
        None,
        None,
        "",
        id="an actor's death for its node's blames not the node that printed it",
    ),
    pytest.param([ILLEGAL_ADDRESS], None, None, "", id="a kernel fault blames no node: the same bug faults anywhere"),
    pytest.param([CUDA_OOM], None, None, "", id="a GPU out-of-memory blames no node: the run's own demand"),
]


@pytest.mark.parametrize(("lines", "driver", "blamed", "why"), BLAME)
def test_a_node_is_blamed_only_on_evidence_against_it(
    lines: list[str], driver: str | None, blamed: str | None, why: str
) -> None:
    found = classify("\n".join(["rollout 4: {...}", *lines]), driver)
    assert found is not None and found.blamed == blamed and why in found.evidence
