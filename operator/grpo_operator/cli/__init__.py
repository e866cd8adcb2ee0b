"""The `grpo` command: validate, plan and render GRPORun files offline, with the operator's own code, and
`grpo doctor`: what the cluster lacks for GRPORuns, and whether a given run can start now (cli/doctor.py);
`grpo results RUN`: a run's eval scores, checkpoint and export, read from the API server (cli/results.py).

Exit status: 0 when every document is valid (every doctor check passes), 1 when any is not (one line per
problem), 2 for a usage error. A user error never prints a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from grpo_operator.api import GRPORun
from grpo_operator.api.runtime import GRPORuntime
from grpo_operator.api.status import ActorMemory, PreemptionGrace, RunPlan, StepTimeSource
from grpo_operator.cli.clusterread import ReadError
from grpo_operator.cli.doctor import cluster_runtime, run_doctor, within_deadline
from grpo_operator.cli.doctorchecks import Target
from grpo_operator.cli.loading import Document, load_documents, load_runtime
from grpo_operator.cli.results import run_results
from grpo_operator.cli.yamldecode import MAX_BYTES
from grpo_operator.planning import validation
from grpo_operator.planning.validation import Problem, Severity, errors
from grpo_operator.render import MissingRewardImage, RenderSettings, render
from grpo_operator.render.yamlout import dump_all


@dataclass
class Checked:
    """A document after structural and semantic validation."""

    doc: Document
    problems: list[Problem]
    plan: RunPlan | None = None

    @property
    def run(self) -> GRPORun | None:
        return self.doc.run

    @property
    def valid(self) -> bool:
        return (self.doc.run is not None or self.doc.runtime is not None) and not errors(self.problems)


def _read(path: str) -> str:
    """The file's text, reading at most one byte past the size limit (the decoder refuses it then)."""
    if path == "-":
        data = sys.stdin.buffer.read(MAX_BYTES + 1)
    else:
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    return data.decode("utf-8", "replace" if len(data) > MAX_BYTES else "strict")


def check_text(text: str, runtime: GRPORuntime | None = None) -> tuple[list[Checked], list[Problem]]:
    documents, file_problems = load_documents(text, runtime)
    checked = []
    for doc in documents:
        if doc.run is None:
            checked.append(Checked(doc, list(doc.problems)))
            continue
        result = validation.check(doc.run)
        checked.append(Checked(doc, result.problems + _same_name(doc, documents), result.plan))
    return checked, file_problems


def _same_name(doc: Document, documents: list[Document]) -> list[Problem]:
    """A warning when an earlier document names the same run in the same namespace: `kubectl apply` creates
    the first and then overwrites it with the second (or refuses the change), so only one run exists."""
    first = next(
        (
            other
            for other in documents
            if other.run is not None
            and doc.run is not None
            and other.index < doc.index
            and (other.run.metadata.name, other.run.metadata.namespace)
            == (doc.run.metadata.name, doc.run.metadata.namespace)
        ),
        None,
    )
    if first is None or doc.run is None:
        return []
    return [
        Problem(
            "metadata.name",
            f"{doc.run.metadata.name} is also the name of document {first.index + 1} in namespace "
            f"{doc.run.metadata.namespace}: kubectl apply keeps one run of that name; rename one of them",
            Severity.WARNING,
        )
    ]


def _emit_problems(checked: list[Checked], out: TextIO) -> None:
    many = len(checked) > 1
    for item in checked:
        for problem in item.problems:
            print(f"{item.doc.label}: {problem}" if many else str(problem), file=out)


def _problem_json(problem: Problem) -> dict[str, str]:
    return {"path": problem.path, "message": problem.message, "severity": problem.severity.value}


def cmd_validate(checked: list[Checked], output: str, out: TextIO) -> int:
    if output == "json":
        rows = [
            {"name": c.doc.label, "valid": c.valid, "problems": [_problem_json(p) for p in c.problems]} for c in checked
        ]
        print(json.dumps(rows, indent=2), file=out)
    else:
        _emit_problems(checked, out)
        for item in checked:
            if item.valid:
                print(f"{item.doc.label}: valid", file=out)
    return 0 if all(c.valid for c in checked) else 1


def reward_guard(run: GRPORun) -> str:
    """The reward's score range and the min-reward floor the guard will apply (the same rule as the guard)."""
    reward = run.spec.reward
    scores = reward.score_range
    span = f"scores {scores[0]:g}..{scores[1]:g}" if scores else "scores unbounded"
    return f"{reward.type.value} ({span}); degenerate at or below {run.spec.guards.min_reward.describe()}"


def grace_text(g: PreemptionGrace) -> str:
    step = "observed p95" if g.step_source is StepTimeSource.OBSERVED else "spec.preemption.stepSeconds"
    capped = (
        f", capped by spec.preemption.maxGraceSeconds (wanted {g.wanted_seconds} s)"
        if g.seconds < g.wanted_seconds
        else ""
    )
    return (
        f"{g.seconds} s = rollout step {g.step_seconds} s ({step}) + save {g.save_seconds} s "
        f"(checkpoint / spec.storage.writeGBps) + margin {g.margin_seconds} s{capped}; the operator's "
        "GRPO_MAX_GRACE_SECONDS may lower it"
    )


def plan_table(plan: RunPlan, run: GRPORun | None = None) -> str:
    a, r = plan.actor_memory, plan.rollout_memory
    rows = [
        ("placement", f"{plan.placement} on {plan.instance_type} ({plan.gpu_model}, {plan.gpu_gib} GiB per GPU)"),
        ("workers", f"{plan.worker_replicas} pod(s) x {plan.gpus_per_node} GPUs = {plan.total_gpus} GPUs"),
        (
            "actor",
            f"{plan.actor_gpus} GPUs, data-parallel {plan.data_parallel}, distributed optimizer "
            "(always, as miles runs adam)",
        ),
        ("rollout", f"{plan.rollout_gpus} GPUs in {plan.rollout_engines} SGLang engine(s)"),
        (f"{plan.fabric} devices per worker", str(plan.fabric_devices_per_node)),
        ("/dev/shm", f"{plan.shm_gib} GiB"),
        ("model", f"{plan.params_billions} B parameters"),
        ("actor GiB/GPU", f"{plan.actor_gib_per_gpu} of {plan.gpu_gib}, by component below"),
        (
            "rollout GiB/GPU",
            f"{plan.rollout_gib_per_gpu} static (weights {r.weights_gib}, KV cache {r.kv_cache_gib} = "
            f"{r.kv_cache_tokens} tokens); free {r.free_gib}, needs {r.needed_free_gib}",
        ),
        ("host GiB/node", f"{plan.host_gib_per_node} of {plan.host_capacity_gib}"),
        (
            "checkpoint",
            f"{plan.checkpoint_gib} GiB each, every {plan.save_interval} rollouts, in {plan.checkpoint_dir}",
        ),
        ("tensorboard", plan.tensorboard_dir),
        ("preemption grace", grace_text(plan.preemption_grace)),
        *([("reward", reward_guard(run))] if run is not None else []),
        ("fits", "yes" if plan.fits else "NO"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join([f"{k.ljust(width)}  {v}" for k, v in rows] + actor_memory_table(a))


def actor_memory_table(a: ActorMemory) -> list[str]:
    """The training estimate per component, with its error against the measurements it was fitted to."""
    err = a.calibration_error_percent

    def margin(*keys: str) -> str:
        found = [err[k] for k in keys if k in err]
        return f"measured within {max(found):.1f}%" if found else "not measured"

    rows = [
        ("weights (bf16)", a.weights_gib, margin("weights")),
        ("grads (fp32)", a.grads_gib, margin("grads")),
        ("optimizer (fp32, / DP)", a.optimizer_gib, margin("optimizer")),
        ("activations (peak)", a.activations_gib, margin("logitsPhase", "trunkBackward")),
        ("  checkpoints", a.checkpoints_gib, margin("checkpoints")),
        ("  layer working set", a.layer_working_set_gib, margin("layerWorkingSet")),
        ("  logits (fp32 log-probs)", a.logits_gib, margin("logits")),
        ("optimizer step (if larger)", a.step_transient_gib, margin("stepTransient")),
        ("context (CUDA, NCCL)", a.context_gib, "measured on 1 GPU"),
        ("allocator margin", a.allocator_margin_gib, "allowance, not a measurement"),
        ("total", a.total_gib, f"peak {margin('total')}" if "total" in err else "not measured"),
    ]
    if not err:
        rows = [(name, gib, "not calibrated" if name == "total" else note) for name, gib, note in rows]
    width = max(len(name) for name, _, _ in rows)
    lines = [f"actor memory per GPU ({a.calibration})"]
    lines += [f"  {name.ljust(width)}  {gib:7.1f} GiB  {note}" for name, gib, note in rows]
    return lines


def cmd_plan(checked: list[Checked], output: str, out: TextIO) -> int:
    rows: list[dict[str, Any]] = []
    for item in checked:
        plan = item.plan
        if output == "json":
            rows.append(
                {
                    "name": item.doc.label,
                    "valid": item.valid,
                    "plan": plan.model_dump(mode="json", by_alias=True) if plan else None,
                    "reward": reward_guard(item.run) if item.run is not None else None,
                    "problems": [_problem_json(p) for p in item.problems],
                }
            )
            continue
        print(f"# {item.doc.label}", file=out)
        if item.doc.runtime is not None:
            print("GRPORuntime: nothing to plan", file=out)
        if plan is not None:
            print(plan_table(plan, item.run), file=out)
        for problem in item.problems:
            print(str(problem), file=out)
    if output == "json":
        print(json.dumps(rows if len(rows) != 1 else rows[0], indent=2), file=out)
    return 0 if all(c.valid for c in checked) else 1


def cmd_render(checked: list[Checked], output: str, out: TextIO, *, job: bool, settings: RenderSettings) -> int:
    """Print the child manifests as multi-document YAML (like `helm template`), or the Ray job as JSON."""
    if not all(c.valid for c in checked):
        _emit_problems([c for c in checked if not c.valid], out)
        return 1
    documents: list[Any] = []
    for item in checked:
        if item.doc.runtime is not None:
            continue  # the operator renders runs; a runtime is applied as it is
        assert item.run is not None and item.plan is not None
        try:
            rendered = render(item.run, item.plan, settings)
        except MissingRewardImage as exc:
            print(str(exc), file=out)
            return 1
        documents += [rendered.job.as_dict()] if job else rendered.children
    if job or output == "json":
        print(json.dumps(documents if len(documents) != 1 else documents[0], indent=2), file=out)
    else:
        print(dump_all(documents), end="", file=out)
    return 0


DOCTOR_TIMEOUT_SECONDS = 60.0  # kubectl's requests have no overall limit; doctor's dozen reads take seconds


def _seconds(text: str) -> float:
    """A positive, finite number of seconds for `--timeout` (argparse makes the refusal one usage line)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < 86_400:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds between 0 and 86400; e.g. 60")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grpo", description="Check, plan and render GRPORun resources offline.")
    sub = parser.add_subparsers(dest="command", required=True)
    text = "check what the cluster lacks for GRPORuns (read-only); with -f, whether that run can start now"
    doctor = sub.add_parser("doctor", help=text, description=text)
    doctor.add_argument("-f", "--filename", help="YAML file with one GRPORun, or - for stdin")
    doctor.add_argument("-o", "--output", choices=("text", "json"), default="text")
    doctor.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
    doctor.add_argument("--context", help="kubeconfig context (default: the current one)")
    doctor.add_argument(
        "--as",
        dest="as_user",
        metavar="USER",
        help="impersonate USER (as kubectl --as): their reads and what they may do with GRPORuns",
    )
    doctor.add_argument(
        "--timeout",
        type=_seconds,
        default=DOCTOR_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help="give up after this long, reads and credential plugins included (default: %(default)s)",
    )
    doctor.add_argument(
        "--values", help="the grpo-operator chart's values file (as given to helm install): check what it enables"
    )
    doctor.add_argument(
        "--runtime",
        help="YAML file with the GRPORuntime the run of -f uses (default: the cluster's, as the operator reads it)",
    )
    text = "print what a run produced: eval scores per set, the last checkpoint, the Hugging Face export"
    results = sub.add_parser("results", help=text, description=text)
    results.add_argument("run", help="the GRPORun's name")
    results.add_argument("-n", "--namespace", help="its namespace (default: the kubeconfig context's)")
    results.add_argument("--json", action="store_true", help="print the status's evaluation and outputs as JSON")
    results.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
    results.add_argument("--context", help="kubeconfig context (default: the current one)")
    for name, text in (
        ("validate", "check every GRPORun and GRPORuntime in FILE; one line per problem"),
        ("plan", "print what each GRPORun needs and whether it fits"),
        ("render", "print the manifests the operator would create"),
    ):
        cmd = sub.add_parser(name, help=text, description=text)
        cmd.add_argument(
            "-f",
            "--filename",
            required=True,
            help="YAML file with one or more GRPORuns (and the GRPORuntimes they name), or - for stdin",
        )
        cmd.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text")
        cmd.add_argument(
            "--runtime", help="YAML file with the GRPORuntime the runs use (default: the built-in AWS types)"
        )
        if name == "render":
            cmd.add_argument("--job", action="store_true", help="print the Ray job submission as JSON")
            cmd.add_argument(
                "--reward-image",
                default=os.environ.get("GRPO_REWARD_IMAGE"),
                help="default reward service image (env GRPO_REWARD_IMAGE)",
            )
    return parser


COMMANDS: dict[str, Callable[[list[Checked], str, TextIO], int]] = {"validate": cmd_validate, "plan": cmd_plan}


def _doctor(args: argparse.Namespace) -> int:
    target = None
    if args.filename is not None:
        ok, runtime = _load_runtime(args.runtime)
        text = _text_of(args.filename) if ok else None
        if text is None:
            return 1
        if args.runtime is None:
            try:
                runtime = cluster_runtime(text, args.kubeconfig, args.context, args.as_user)
            except ReadError as exc:
                # The file's own problems come first: a broken run needs no cluster to be refused.
                checked = _checked(args.filename, text, None)
                own = [p for c in checked or [] for p in errors(c.problems) if p.path != "spec.runtimeRef.name"]
                if own:
                    _emit_problems(checked or [], sys.stdout)
                elif checked is not None:
                    print(f"grpo doctor: {exc}", file=sys.stderr)
                return 1
        checked = _checked(args.filename, text, runtime)
        if checked is None:
            return 1
        if len(checked) != 1 or not checked[0].valid:
            _emit_problems(checked, sys.stdout)
            if len(checked) > 1:
                print(f"{args.filename}: {len(checked)} documents; grpo doctor -f checks one run: split the file")
            return 1
        item = checked[0]
        assert item.run is not None and item.plan is not None
        target = Target(item.run, item.plan)
    return run_doctor(
        target,
        kubeconfig=args.kubeconfig,
        context=args.context,
        output=args.output,
        out=sys.stdout,
        err=sys.stderr,
        values=args.values,
        as_user=args.as_user,
    )


def _load_runtime(filename: str | None) -> tuple[bool, GRPORuntime | None]:
    """(True, the runtime in the file) or (True, None) without a file; (False, None) after saying why not."""
    if filename is None:
        return True, None
    try:
        runtime, problems = load_runtime(_read(filename))
    except OSError as exc:
        print(f"{filename}: cannot read: {exc.strerror}", file=sys.stderr)
        return False, None
    except UnicodeDecodeError as exc:
        print(
            f"{filename}: not a text file: byte {exc.start + 1} is not UTF-8; save the file as UTF-8", file=sys.stderr
        )
        return False, None
    for problem in problems:
        print(f"{filename}: {problem}", file=sys.stdout)
    return runtime is not None, runtime


def _text_of(filename: str) -> str | None:
    """The file's text; or None after one line saying why not."""
    try:
        return _read(filename)
    except OSError as exc:
        print(f"{filename}: cannot read: {exc.strerror}", file=sys.stderr)
    except UnicodeDecodeError as exc:
        print(
            f"{filename}: not a text file: byte {exc.start + 1} is not UTF-8; save the file as UTF-8",
            file=sys.stderr,
        )
    return None


def _checked(filename: str, text: str, runtime: GRPORuntime | None) -> list[Checked] | None:
    """The file's documents, checked; or None after saying what is wrong with the file as a whole."""
    checked, file_problems = check_text(text, runtime)
    if file_problems:
        for problem in file_problems:
            print(f"{filename}: {problem.message}", file=sys.stdout)
        return None
    return checked


def _load(filename: str, runtime_file: str | None = None) -> list[Checked] | None:
    """The file's documents, checked; or None after one line saying why not."""
    ok, runtime = _load_runtime(runtime_file)
    text = _text_of(filename) if ok else None
    return None if text is None else _checked(filename, text, runtime)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "doctor":
        return within_deadline(lambda: _doctor(args), args.timeout, sys.stderr)
    if args.command == "results":
        code, why = run_results(
            args.run, args.namespace, args.kubeconfig, args.context, as_json=args.json, out=sys.stdout
        )
        if why:
            print(f"grpo results: {why}", file=sys.stderr)
        return code
    checked = _load(args.filename, args.runtime)
    if checked is None:
        return 1
    if args.command == "render":
        return cmd_render(
            checked, args.output, sys.stdout, job=args.job, settings=RenderSettings(reward_image=args.reward_image)
        )
    return COMMANDS[args.command](checked, args.output, sys.stdout)


def entrypoint() -> None:
    """Console script: `main`, quiet when the reader of stdout goes away (`grpo plan ... | head`)."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        code = 0
    sys.exit(code)
