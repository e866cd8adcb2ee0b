"""A test double for miles's `train.py`, run as a Ray job entrypoint: serves miles-format gauges, then exits.

Usage (the operator's rendered miles argv, unchanged, after this script's path):

    python devtools/grpo_dev/fake_miles.py python3 /root/miles/train.py <miles flags...> [--fake-* knobs]

It reads only the miles flags it needs (`--num-rollout`, `--use-prometheus`, `--prometheus-port`,
`--prometheus-run-name`, `--wandb-group`, `--load`, `--save`, `--save-interval`, `--save-trigger-sentinel`)
and ignores every other one. What it imitates, read from radixark/miles at the pinned commit dec268f7:

* Gauges. With `--use-prometheus` miles's driver starts a Ray actor, pinned to the driver's node, that runs
  prometheus_client's `start_http_server(args.prometheus_port)` (`miles/utils/tracking_utils/
  prometheus_utils.py:29-45,88-89`) and creates one Gauge per logged key on first use, named `miles_metric_` +
  the key with `/` and `-` as `_` and `@` as `_at_`, documented with the key, labelled `run_name`
  (`--prometheus-run-name`, else `--wandb-group`, else `miles_training`) (`prometheus_utils.py:82-106`). So the
  endpoint answers before the first rollout but has no `miles_metric_*` series until one is logged. The
  actor's lifetime is the job's (`tracking_utils/base.py:119-121`, `finish()` is a no-op): the gauges are gone
  the moment the job ends. This double serves from its own process and exits at once after the last rollout:
  no linger, so the last rollouts are not scrapeable, as with miles.
* Rollout lines. Per rollout (0-based `rollout_id`, also `rollout/step` since `compute_rollout_step` returns
  the id by default, `utils/metric_utils.py:117-120`) it writes what miles logs, as miles's logger writes it:
  to stderr, `[<time> <name>] <file>:<line> - <message>` (`utils/logging_utils.py:33-38`), the name the
  process identity's (`utils/audit_utils/process_identity.py`: `rollout_manager`, `actor_cell0_rank0`), and,
  since those run in Ray actors, behind the `(ClassName pid=<pid>)` prefix Ray puts on forwarded actor
  output: `perf <id>: {'rollout/repetition_frac': .., 'rollout/truncated_ratio': .., ...}` (the
  `RolloutManager` actor, `ray/rollout/metrics.py:79`), `rollout <id>: {'rollout/raw_reward': .., ...}` (the
  `MegatronTrainRayActor`, `backends/training_utils/log_utils.py:66`) and `perf <id>: {'perf/step_time': ..}`
  (`utils/train_metric_utils.py:50`), and sets the gauges of those keys and `rollout/step`.
* Resume. The loop runs `range(args.start_rollout_id, args.num_rollout)` (`train.py:94`) with the start at the
  loaded checkpoint's iteration + 1 (`backends/megatron_utils/actor.py:196`): a resumed job numbers its
  rollouts from the checkpoint + 1, at or below what the stopped job had reached.
* Rewards. With `--fake-score-rewards` (off by default: most runs of the suite have no reward service to call) and
  `--custom-rm-path` (the remote reward service's client, `--rm-url` its URL) each rollout scores one
  group of `--n-samples-per-prompt` samples (2 by default) of a made-up math answer through that function, loaded
  by module path and awaited as `await rm_function(args, samples)` with objects carrying `.prompt`, `.response`
  and `.label` (`miles/utils/misc.py:47`, `miles/rollout/rm_hub/__init__.py:19-24,89-106`), and logs
  `reward <id>: [...]` (a line of this double's, not miles's). An exception there fails the run, as in miles at
  dec268f7, whose default rollout takes each group's `task.result()` unguarded (`sglang_rollout.py:463-465`).
  With `--fake-miles-version v0.1.0` it is swallowed instead, as v0.1.0's default class-based rollout swallows a
  group's exception (`miles/rollout/inference_rollout/inference_rollout_train.py:121-126` at v0.1.0,
  docs/integrations/miles.md): logged as `[rollout] Task raised exception: <repr>`, the group dropped and
  another one scored, so with the reward service down the double never advances and never exits on its own.
* When run as a Ray job (RAY_ADDRESS set) it connects to the cluster with `ray.init()` first: miles's
  `train.py` never calls it, Ray connects on its first `placement_group()` (`train.py:26`,
  `ray/placement_group.py:57`), before any rollout; either way the job's `driver_info` carries the node IP.

* Evaluation. With `--eval-interval` and `--eval-prompt-data <name> <path> ...` it evaluates where `train.py`
  does: once before the first rollout unless `--skip-eval-before-train` (`train.py:95-96`), then after rollout
  `rollout_id` when `should_run_periodic_action(rollout_id, eval_interval)` (`train.py:135-136`,
  `utils/misc.py:208-229`: `(rollout_id + 1) % interval == 0`; the operator renders `--num-rollout`, so
  `num_rollout_per_epoch` is None, `ray/placement_group.py:193-196`, and unlike a save the last rollout is not forced). Each evaluation logs what `log_eval_rollout_data` logs
  (`ray/rollout/metrics.py:21-59`): per set `eval/<name>` (the mean reward, a None counted as 0),
  `eval/<name>-none_reward_ratio`, `eval/<name>-truncated_ratio`, the line `eval <rollout_id>: {...}` from the
  `RolloutManager` actor (`metrics.py:53`), and the gauges of those keys and `eval/step` through the same tracking
  path (`metrics.py:55-57`, `tracking_utils/base.py:119-131`). The scores come from `--fake-eval-score` (a series
  indexed by the evaluation's number, 0 the baseline), the ratios from `--fake-eval-truncated` and
  `--fake-eval-none-ratio` (same indexing); a none ratio above 0 also logs miles's warning (`metrics.py:32-36`).
* Hugging Face export. With `--save-hf <template>` each save of `--fake-checkpoints` also writes
  `template.format(rollout_id=...)` with a `config.json` and a `model.safetensors`, as miles's `save_hf_model` does
  (`backends/megatron_utils/actor.py:658-661`, `model.py:869-917`); `--fake-skip-hf-export` logs miles's
  "Failed to save HuggingFace format" error instead and writes nothing, as miles does when the export fails
  (it never raises).

With `--fake-checkpoints` (off by default, so a test never writes under the rendered `/fsx/...` paths unless
it asks), checkpoints follow miles's `train.py` loop: resume at `latest_checkpointed_iteration.txt` + 1 under
`--load`, reading the rollout data state of that iteration (`rollout/global_dataset_state_dict_<id>.pt`) or
logging `Checkpoint <path> does not exist.` as miles does (`miles/rollout/data_source.py:138-149`); save when
`(rollout_id + 1) % --save-interval == 0`, at the last rollout, or when the `--save-trigger-sentinel` file
exists (`train.py:120-126`), in miles's order (`train.py:76-90`): the model (`--save/iter_XXXXXXX/fake_checkpoint`
and Megatron's tracker `latest_checkpointed_iteration.txt`), then, `--fake-data-state-seconds` later (1 s by
default), the rollout manager's data state, and only then the sentinel's removal. A SIGTERM during the save ends
it there, as it would end miles. An unwritable `--save` fails the run, as it would fail miles.

Knobs (on the command line, or per run as a JSON list in `--fake-knobs-dir`/<run name>.json, which wins; the
directory may also come as FAKE_MILES_KNOBS_DIR, for a job whose argv the launcher holds to the run config):
`--fake-step-seconds` (0.3); `--fake-reward`, `--fake-repetition`, `--fake-truncated` (a float, or a
comma list indexed by rollout_id whose last value repeats); `--fake-exit-code` (0); `--fake-fail-message TEXT`
(printed as the last stderr line; implies exit code 1 unless `--fake-exit-code` is non-zero);
`--fake-data-state-seconds` (1.0: the pause between the tracker and the data state of a save); `--fake-fail-reason WORD` (writes `{"reason": WORD, "message": TEXT}` to the file named by `GRPO_FAILURE_FILE`
before failing, as a component inside miles that ends the run on purpose does; see grpo_launcher.summary);
`--fake-fail-after N` (exit at rollout_id N instead of after the last rollout); `--fake-stall-after N` (stop
advancing at rollout_id N but keep serving until killed); `--fake-print-env NAME` (repeatable: print NAME's value as
the driver and, in a Ray job, a task on each node see it, as a tracker library that logs its settings would leak
a key; what the kept logs must not hold); `--fake-hang-frames` (with `--fake-stall-after`: the
stall looks as a hung miles does to the evidence capture: the driver waits in `fake_driver_waits_in_rollout`; as a
Ray job it starts one num_cpus=0 actor, on a node other than the driver's when there is one, as miles's
`RolloutManager` drives SGLang engines on the GPU workers, that waits in `fake_actor_waits_in_generate` after
spawning a Python subprocess, as SGLang's engine starts its scheduler and detokenizer (`mp.Process` in
`sglang/srt/entrypoints/engine.py` `_launch_subprocesses`, read on SGLang's main branch, not at the image's pin),
that waits in `fake_scheduler_waits_for_batch`; and where `TORCH_NCCL_DEBUG_INFO_TEMP_FILE`
is set it writes a stand-in flight-recorder dump at that path + rank 0, where torch would on a watchdog timeout);
`--fake-miles-version dec268f7|v0.1.0` (dec268f7: which version's handling of a group's reward exception, see
Rewards); `--fake-bind-address` (127.0.0.1: miles binds
0.0.0.0, but this project's local servers listen on loopback only). SIGTERM (Ray's stop_job) exits at once
with 143.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

METRIC_PREFIX = "miles_metric_"
DEFAULT_RUN_NAME = "miles_training"
CHECKPOINT_MARKER = "latest_checkpointed_iteration.txt"
DATA_STATE = "rollout/global_dataset_state_dict_{}.pt"
MILES_VERSIONS = ("dec268f7", "v0.1.0")  # the behaviours this double imitates; the first is the default


class Terminated(Exception):
    """SIGTERM arrived (Ray's stop_job)."""


def series(text: str) -> list[float]:
    """`0.5` or `0.1,0.2,0.3` -> values indexed by rollout_id, the last one repeating."""
    try:
        values = [float(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a float or a comma-separated list of floats") from None
    return values


def at(values: list[float], rollout_id: int) -> float:
    return values[min(rollout_id, len(values) - 1)]


def gauge_name(key: str) -> str:
    """miles's `_PrometheusCollector.update` naming, verbatim."""
    return METRIC_PREFIX + key.replace("/", "_").replace("-", "_").replace("@", "_at_")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fake_miles.py", allow_abbrev=False, description=__doc__.splitlines()[0])
    miles = parser.add_argument_group("miles flags it reads (all others are ignored)")
    miles.add_argument("--num-rollout", type=int, default=None)
    miles.add_argument("--use-prometheus", action="store_true")
    # miles: default=int(os.environ.get("PROMETHEUS_PORT", "9090")) at parser build time (a k8s Service named
    # `prometheus` injecting PROMETHEUS_PORT=tcp://... breaks it there, and here).
    miles.add_argument("--prometheus-port", type=int, default=int(os.environ.get("PROMETHEUS_PORT", "9090")))
    miles.add_argument("--prometheus-run-name", default=None)
    miles.add_argument("--wandb-group", default=None)
    miles.add_argument("--load", default=None)
    miles.add_argument("--save", default=None)
    miles.add_argument("--save-interval", type=int, default=None)
    miles.add_argument("--save-trigger-sentinel", default=None)
    miles.add_argument("--custom-rm-path", default=None)
    miles.add_argument("--rm-url", default=None)
    miles.add_argument("--n-samples-per-prompt", type=int, default=2)
    miles.add_argument("--eval-interval", type=int, default=None)
    miles.add_argument("--eval-prompt-data", nargs="+", default=None)
    miles.add_argument("--skip-eval-before-train", action="store_true")
    miles.add_argument("--save-hf", default=None)
    fake = parser.add_argument_group("test-double knobs")
    fake.add_argument("--fake-step-seconds", type=float, default=0.3)
    fake.add_argument("--fake-reward", type=series, default=[0.5])
    fake.add_argument("--fake-repetition", type=series, default=[0.0])
    fake.add_argument("--fake-truncated", type=series, default=[0.0])
    fake.add_argument("--fake-exit-code", type=int, default=0)
    fake.add_argument("--fake-fail-message", default=None)
    fake.add_argument("--fake-fail-after", type=int, default=None)
    fake.add_argument("--fake-stall-after", type=int, default=None)
    fake.add_argument("--fake-hang-frames", action="store_true")
    fake.add_argument("--fake-fail-reason", default=None)
    fake.add_argument("--fake-bind-address", default="127.0.0.1")
    fake.add_argument("--fake-checkpoints", action="store_true")
    fake.add_argument("--fake-data-state-seconds", type=float, default=1.0)
    fake.add_argument("--fake-score-rewards", action="store_true")
    fake.add_argument("--fake-print-env", action="append", default=[])
    fake.add_argument("--fake-eval-score", type=series, default=[0.5])
    fake.add_argument("--fake-eval-truncated", type=series, default=[0.0])
    fake.add_argument("--fake-eval-none-ratio", type=series, default=[0.0])
    fake.add_argument("--fake-skip-hf-export", action="store_true")
    fake.add_argument("--fake-miles-version", choices=MILES_VERSIONS, default=MILES_VERSIONS[0])
    # The reward client's retry budget comes from the image's environment (GRPO_REWARD_RETRY_BUDGET_S, 600 s by
    # default); a test shortens it for one run here, where the client is loaded (this process).
    fake.add_argument("--fake-reward-retry-budget", type=float, default=None)
    # From the environment too: where a launcher checks miles's argv against the run config (a real Ray job).
    fake.add_argument("--fake-knobs-dir", type=Path, default=os.environ.get("FAKE_MILES_KNOBS_DIR"))
    return parser


def knobs_for(args: argparse.Namespace) -> list[str]:
    """The `--fake-*` knobs a test left for this run in `--fake-knobs-dir`/<run name>.json (a JSON list): the
    operator refuses flags miles does not know in spec.extraArgs, so per-run knobs cannot travel there."""
    name = args.prometheus_run_name or os.environ.get("GRPO_RUN")
    if args.fake_knobs_dir is None or not name:
        return []
    path = args.fake_knobs_dir / f"{name}.json"
    return [str(k) for k in json.loads(path.read_text())] if path.is_file() else []


@dataclass
class Checkpoints:
    """miles's save/resume cadence with marker files in place of torch_dist checkpoints."""

    load: str | None
    save: str | None
    interval: int | None
    sentinel: str | None
    num_rollout: int
    data_state_seconds: float = 1.0
    save_hf: str | None = None
    skip_hf: bool = False

    def start_rollout_id(self) -> int:
        if self.load is None:
            return 0
        marker = Path(self.load) / CHECKPOINT_MARKER
        if not marker.is_file():
            return 0
        iteration = int(marker.read_text().strip())
        log(f"loaded checkpoint iteration {iteration} from {self.load}, resuming at rollout {iteration + 1}")
        state = Path(self.load) / DATA_STATE.format(iteration)
        log(f"load metadata from {state}" if state.is_file() else f"Checkpoint {state} does not exist.")
        return iteration + 1

    def after_rollout(self, rollout_id: int, sleep: Callable[[float], None] = time.sleep) -> None:
        if self.save is None:
            return
        external = self.sentinel is not None and os.path.exists(self.sentinel)
        periodic = self.interval is not None and (
            rollout_id == self.num_rollout - 1 or (rollout_id + 1) % self.interval == 0
        )
        if not (external or periodic):
            return
        directory = Path(self.save) / f"iter_{rollout_id:07d}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "fake_checkpoint").write_text(f"{rollout_id}\n")
        (Path(self.save) / CHECKPOINT_MARKER).write_text(f"{rollout_id}\n")
        log(f"saved checkpoint iteration {rollout_id} to {self.save}" + (" (sentinel)" if external else ""))
        self.export_hf(rollout_id)
        sleep(self.data_state_seconds)  # the rollout manager's save comes after the model's (train.py:90)
        state = Path(self.save) / DATA_STATE.format(rollout_id)
        state.parent.mkdir(parents=True, exist_ok=True)
        state.write_text(json.dumps({"sample_offset": rollout_id + 1}))
        log(f"saved rollout data state {state}")
        if external and self.sentinel is not None:
            os.remove(self.sentinel)

    def export_hf(self, rollout_id: int) -> None:
        """miles's `save_hf_model` after the model's save (`actor.py:658-661`): errors are logged, never raised."""
        if self.save_hf is None:
            return
        path = Path(self.save_hf.format(rollout_id=rollout_id))
        if self.skip_hf:
            log(f"Failed to save HuggingFace format: --fake-skip-hf-export ({path})", "actor_cell0_rank0", "model.py")
            return
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text(json.dumps({"architectures": ["FakeForCausalLM"], "rollout_id": rollout_id}))
        (path / "model.safetensors").write_bytes(b"fake weights of rollout %d\n" % rollout_id)
        log(f"Successfully saved merged HuggingFace model to {path}", "actor_cell0_rank0", "model.py")


class Gauges:
    """The Prometheus side of miles's collector actor, in this process."""

    def __init__(self, run_name: str) -> None:
        from prometheus_client import Gauge

        self._gauge_type = Gauge
        self._gauges: dict[str, Any] = {}
        self._run_name = run_name

    def update(self, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            name = gauge_name(key)
            if name not in self._gauges:
                self._gauges[name] = self._gauge_type(name, key, ["run_name"])
            self._gauges[name].labels(self._run_name).set(value)


@dataclass
class Sample:
    """The fields of miles's Sample a reward function reads."""

    prompt: str
    response: str
    label: str


def score_group(args: argparse.Namespace, rollout_id: int) -> list[float]:
    """One group through `--custom-rm-path`, as miles's group reward calls it (module doc)."""
    import asyncio
    import importlib

    module, _, name = str(args.custom_rm_path).rpartition(".")
    function = getattr(importlib.import_module(module), name)
    answer = str(rollout_id + 2)
    samples = [
        Sample(f"What is {rollout_id} + 2?", f"The answer is \\boxed{{{answer if i % 2 == 0 else 'x'}}}", answer)
        for i in range(max(1, args.n_samples_per_prompt))
    ]
    scores = asyncio.run(function(args, samples))
    return [float(score) for score in scores]


def score_until_a_group_lands(args: argparse.Namespace, rollout_id: int, sleep: Callable[[float], None]) -> list[float]:
    """dec268f7: one group, its exception ends the run. v0.1.0: an exception is logged and another group tried,
    until one is scored (`inference_rollout_train.py:121-126` at v0.1.0: `except Exception as e:
    logger.error(f"[rollout] Task raised exception: {e!r}", exc_info=True); continue`)."""
    while True:
        try:
            return score_group(args, rollout_id)
        except Exception as exc:
            if args.fake_miles_version == "dec268f7":
                raise
            log(f"[rollout] Task raised exception: {exc!r}", "rollout_manager", "inference_rollout_train.py:125")
            sleep(max(args.fake_step_seconds, 0.1))  # the next prompts; a SIGTERM ends the wait


TRAIN_ACTOR = "MegatronTrainRayActor"
RAY_PREFIX = "\x1b[36m({actor} pid={pid})\x1b[0m "  # Ray's prefix on an actor's forwarded output (colored)


def print_env(names: list[str], in_ray: bool) -> None:
    """Each variable as the driver sees it and, in a Ray job, as a task pinned to each live node sees it."""
    seen = {socket.gethostname(): {n: os.environ.get(n, "<unset>") for n in names}}
    if in_ray:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        @ray.remote(num_cpus=0)
        def env_of(wanted: list[str]) -> tuple[str, dict[str, str]]:
            return socket.gethostname(), {n: os.environ.get(n, "<unset>") for n in wanted}

        nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]
        pinned = [
            env_of.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(names)
            for node in nodes
        ]
        seen.update(ray.get(pinned, timeout=120))
    for host, values in sorted(seen.items()):
        for name, value in values.items():
            log(f"{name}={value} on {host}")


def log(message: str, source: str = "main", where: str = "fake_miles.py", actor: str | None = None) -> None:
    """One line as miles's logger writes it (stderr, `utils/logging_utils.py:33-38`), behind Ray's prefix when
    miles would log it from an actor."""
    now = time.time()
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1000):03d}"
    prefix = RAY_PREFIX.format(actor=actor, pid=os.getpid()) if actor else ""
    print(f"{prefix}[{stamp} {source}] {where} - {message}", file=sys.stderr, flush=True)


@dataclass
class Evaluator:
    """miles's `log_eval_rollout_data` for the eval sets of `--eval-prompt-data`, scores from the knobs."""

    names: list[str]
    score: list[float]
    truncated: list[float]
    none_ratio: list[float]
    done: int = 0

    @classmethod
    def of(cls, args: argparse.Namespace) -> Evaluator | None:
        if args.eval_interval is None or not args.eval_prompt_data:
            return None
        names = args.eval_prompt_data[0::2]
        return cls(names, args.fake_eval_score, args.fake_eval_truncated, args.fake_eval_none_ratio)

    def evaluate(self, rollout_id: int, gauges: Gauges | None) -> None:
        n, logged = self.done, {}
        for name in self.names:
            none = at(self.none_ratio, n)
            logged[f"eval/{name}-none_reward_ratio"] = none
            if none:
                log(
                    f"eval/{name}: {none:g} of samples have reward=None (likely errored/aborted trials); treating "
                    "as 0.0 for metrics.",
                    "rollout_manager",
                    "metrics.py:33",
                    actor="RolloutManager",
                )
            logged[f"eval/{name}"] = at(self.score, n)
            logged[f"eval/{name}-truncated_ratio"] = at(self.truncated, n)
        log(f"eval {rollout_id}: {logged}", "rollout_manager", "metrics.py:53", actor="RolloutManager")
        if gauges is not None:
            gauges.update({**logged, "eval/step": rollout_id})
        self.done += 1


# The scheduler stand-in: it exits once its parent (the actor's worker) is gone, so a stopped job leaves nothing.
SCHEDULER = """
import os, time
parent = os.getppid()
def fake_scheduler_waits_for_batch():
    while os.getppid() == parent:
        time.sleep(0.5)
print("scheduler up", flush=True)
fake_scheduler_waits_for_batch()
"""
FLIGHT_RECORDER_RANK = 0
_HELD: list[Any] = []


def fake_driver_waits_in_rollout(stop: threading.Event) -> None:
    """Where the hung driver waits (a stack dump names this frame); it says so from inside it, so a stack taken on
    that line finds the driver here, not still on its way in."""
    log("the driver waits in fake_driver_waits_in_rollout")
    stop.wait()


def spawn_scheduler() -> subprocess.Popen[str]:
    """A Python child as SGLang's scheduler is, blocked in `fake_scheduler_waits_for_batch`, once it is up."""
    child = subprocess.Popen([sys.executable, "-c", SCHEDULER], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    child.stdout.readline()
    return child


def fake_actor_waits_in_generate() -> None:
    """The actor's hang: its scheduler spawned, then a wait that never ends (a stack dump names this frame)."""
    spawn_scheduler()
    while True:
        time.sleep(0.5)


def other_node(nodes: list[dict[str, Any]], driver_node: str) -> str | None:
    """An alive node other than the driver's, or None when the driver's is the only one."""
    others = sorted(str(n["NodeID"]) for n in nodes if n.get("Alive") and n.get("NodeID") != driver_node)
    return others[0] if others else None


def write_flight_recorder_standin(prefix: str) -> Path:
    """Some pickled bytes where torch's flight recorder writes rank 0's dump (`<prefix><rank>`, torch's
    `DebugInfoWriter`; docs/integrations/torch.md): not torch's format, only its place and its being binary."""
    path = Path(f"{prefix}{FLIGHT_RECORDER_RANK}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(
        pickle.dumps({"version": "fake_miles stand-in", "entries": [{"profiling_name": "nccl:all_reduce"}]})
    )
    return path


def hang_frames() -> None:
    """`--fake-hang-frames`: the actor and its scheduler (as a Ray job), and the flight-recorder stand-in."""
    prefix = os.environ.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
    if prefix:
        log(f"wrote flight-recorder stand-in {write_flight_recorder_standin(prefix)}")
    if "RAY_ADDRESS" not in os.environ:
        return
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    @ray.remote(num_cpus=0)
    class FakeRolloutEngine:
        def generate(self) -> None:
            fake_actor_waits_in_generate()

    target = other_node(ray.nodes(), ray.get_runtime_context().get_node_id())  # type: ignore[no-untyped-call]
    options: dict[str, Any] = {}
    if target is not None:
        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(target, soft=False)
    engine = FakeRolloutEngine.options(**options).remote()  # type: ignore[attr-defined]
    engine.generate.remote()
    _HELD.append(engine)  # a dropped handle would end the actor
    log(f"hung actor started on node {target or 'of the driver'}")


def main(argv: list[str] | None = None) -> int:
    raw = sys.argv[1:] if argv is None else argv
    # A launcher's `--` before miles's argv must not turn miles's flags into positionals.
    args, ignored = build_parser().parse_known_args([a for a in raw if a != "--"])
    if knobs := knobs_for(args):
        args, ignored = build_parser().parse_known_args([a for a in raw if a != "--"] + knobs)
    if args.fake_reward_retry_budget is not None:
        os.environ["GRPO_REWARD_RETRY_BUDGET_S"] = str(args.fake_reward_retry_budget)
    if args.num_rollout is None:
        print(
            "fake_miles: --num-rollout is required (this stand-in cannot derive it from --num-epoch)", file=sys.stderr
        )
        return 2
    stop = threading.Event()

    def on_sigterm(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    if "RAY_ADDRESS" in os.environ:  # a Ray job: register a driver like miles does, so driver_info is filled
        import ray

        ray.init(log_to_driver=False)
    signal.signal(signal.SIGTERM, on_sigterm)  # after ray.init, which installs its own
    if args.fake_print_env:
        print_env(args.fake_print_env, "RAY_ADDRESS" in os.environ)

    def sleep(seconds: float) -> None:
        if stop.wait(seconds):
            raise Terminated

    checkpoints = Checkpoints(
        args.load,
        args.save,
        args.save_interval,
        args.save_trigger_sentinel,
        args.num_rollout,
        args.fake_data_state_seconds,
        args.save_hf,
        args.fake_skip_hf_export,
    )
    if not args.fake_checkpoints:
        checkpoints = Checkpoints(None, None, None, None, args.num_rollout)
    exit_code = args.fake_exit_code or (1 if args.fake_fail_message else 0)
    gauges: Gauges | None = None
    try:
        if args.use_prometheus:
            from prometheus_client import start_http_server

            run_name = args.prometheus_run_name or args.wandb_group or DEFAULT_RUN_NAME
            start_http_server(args.prometheus_port, addr=args.fake_bind_address)
            gauges = Gauges(run_name)
            log(f"Prometheus metrics server on {args.fake_bind_address}:{args.prometheus_port}, run_name={run_name}")
        log(f"ignoring {len(ignored)} other arguments; num_rollout={args.num_rollout}")
        start = checkpoints.start_rollout_id()
        evaluator = Evaluator.of(args)
        for rollout_id in range(start, args.num_rollout):
            if evaluator is not None and rollout_id == start and not args.skip_eval_before_train:
                evaluator.evaluate(rollout_id, gauges)
            if args.fake_fail_after is not None and rollout_id >= args.fake_fail_after:
                break
            if args.fake_stall_after is not None and rollout_id >= args.fake_stall_after:
                log(f"stalled before rollout {rollout_id} (--fake-stall-after {args.fake_stall_after})")
                if args.fake_hang_frames:
                    hang_frames()
                fake_driver_waits_in_rollout(stop)
                raise Terminated
            began = time.monotonic()
            sleep(args.fake_step_seconds)
            samples = {
                "rollout/repetition_frac": at(args.fake_repetition, rollout_id),
                "rollout/truncated_ratio": at(args.fake_truncated, rollout_id),
                "perf/rollout_time": time.monotonic() - began,
            }
            train = {"rollout/raw_reward": at(args.fake_reward, rollout_id), "rollout/log_probs": -0.5}
            perf = {"perf/step_time": time.monotonic() - began}
            if args.fake_score_rewards and args.custom_rm_path and args.rm_url:
                scores = score_until_a_group_lands(args, rollout_id, sleep)
                log(f"reward {rollout_id}: {scores} from {args.rm_url}", "rollout_manager")
            log(f"perf {rollout_id}: {samples}", "rollout_manager", "metrics.py:79", actor="RolloutManager")
            log(f"rollout {rollout_id}: {train}", "actor_cell0_rank0", "log_utils.py:66", actor=TRAIN_ACTOR)
            log(f"perf {rollout_id}: {perf}", "actor_cell0_rank0", "train_metric_utils.py:50", actor=TRAIN_ACTOR)
            if gauges is not None:
                gauges.update({**samples, **train, **perf, "rollout/step": rollout_id})
            checkpoints.after_rollout(rollout_id, sleep)
            if evaluator is not None and (rollout_id + 1) % args.eval_interval == 0:
                evaluator.evaluate(rollout_id, gauges)
    except Terminated:
        log("received SIGTERM, exiting")
        return 128 + signal.SIGTERM
    except OSError as exc:  # e.g. an unwritable --save: miles would crash too
        print(f"fake_miles: {exc}", file=sys.stderr, flush=True)
        return 1
    if args.fake_fail_reason and os.environ.get("GRPO_FAILURE_FILE"):
        failure = {"reason": args.fake_fail_reason, "message": args.fake_fail_message or args.fake_fail_reason}
        Path(os.environ["GRPO_FAILURE_FILE"]).write_text(json.dumps(failure))
        exit_code = exit_code or 1
    if args.fake_fail_message:
        print(args.fake_fail_message, file=sys.stderr, flush=True)
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
