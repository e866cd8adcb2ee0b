"""Command line: ``python -m grpo_launcher {run,preflight,provenance,evaluate}``.

``run --config FILE -- <miles argv...>`` is the Ray job entrypoint. Everything after the first ``--`` is
miles's argv, taken verbatim. User errors (a bad config, a stale argv, a missing ``--``) print one message and
exit 2; a failed preflight exits 3 with ``preflight failed: <check>: <reason>`` as its last line before the
``GRPO_RUN_SUMMARY`` line (``grpo_launcher.summary``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from grpo_launcher.checks import PREFLIGHT_FAILED_EXIT, print_report
from grpo_launcher.config import DEFAULT_CONFIG_PATH, ConfigError, load_run_config
from grpo_launcher.evaluate.cli import add_arguments as add_evaluate
from grpo_launcher.evaluate.cli import run_from_args as run_evaluate
from grpo_launcher.host_checks import HostPaths
from grpo_launcher.launch import METRICS_ADDR, USAGE_EXIT, RunOptions, StaleConfigError, run
from grpo_launcher.preflight import PreflightEnv, run_preflight
from grpo_launcher.prepare import ModelScriptError, model_args_from_py
from grpo_launcher.presave import add_presave, run_presave
from grpo_launcher.provenance import ProvenanceSources, collect, provenance_line

_PATH_FLAGS = {
    "libcuda": "library name or path dlopen()ed as libcuda",
    "shm": "the shared-memory mount",
    "infiniband_dev": "directory of uverbs* device nodes",
    "infiniband_sysfs": "sysfs directory listing the node's RDMA devices",
    "fi_info": "libfabric's fi_info executable",
    "ibv_devinfo": "rdma-core's ibv_devinfo executable",
    "gdrdrv": "the GDRCopy device node",
    "gdrcopy_lib_dir": "directory holding libgdrapi.so",
}


def _add_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG_PATH, help="run config JSON (%(default)s)")


def _add_paths(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("device paths (defaults are the real ones; tests stand them in)")
    defaults = HostPaths()
    for name, text in _PATH_FLAGS.items():
        group.add_argument(f"--{name.replace('_', '-')}", dest=name, default=str(getattr(defaults, name)), help=text)


def _paths(args: argparse.Namespace) -> HostPaths:
    values = {name: getattr(args, name) for name in _PATH_FLAGS}
    return HostPaths(
        libcuda=values.pop("libcuda"),
        **{k: Path(v) for k, v in values.items()},
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m grpo_launcher", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run_p = sub.add_parser("run", help="provenance, preflight, then miles: run --config FILE -- <miles argv>")
    _add_config(run_p)
    _add_paths(run_p)
    run_p.add_argument("--metrics-addr", default=METRICS_ADDR, help="address of the metrics server (%(default)s)")
    run_p.add_argument("--skip-preflight", action="store_true", help="start miles without the preflight")
    pre_p = sub.add_parser("preflight", help="run the preflight checks alone")
    _add_config(pre_p)
    _add_paths(pre_p)
    sub.add_parser("provenance", help="print the provenance JSON line")
    add_evaluate(sub.add_parser("evaluate", help="offline AIME-style evaluation against an SGLang server"))
    args_p = sub.add_parser("model-args", help="print a miles v0.1.0 model script's flags, one per line (read by AST)")
    args_p.add_argument("script", type=Path, help="scripts/models/<type>.py")
    add_presave(sub.add_parser("presave", help="preStop hook: ask miles for a checkpoint and wait for it"))
    return parser


def _print_model_args(script: Path) -> int:
    try:
        flags = model_args_from_py(script.read_text(encoding="utf-8"), str(script))
    except OSError as exc:
        sys.stderr.write(f"cannot read the model script {script}: {exc.strerror}\n")
        return 1
    except ModelScriptError as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    sys.stdout.write("".join(f"{flag}\n" for flag in flags))
    return 0


def _split(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    if "--" not in argv:
        return list(argv), None
    cut = list(argv).index("--")
    return list(argv[:cut]), list(argv[cut + 1 :])


def main(argv: Sequence[str] | None = None) -> int:
    own, miles_argv = _split(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(own)
    try:
        if args.command == "run":
            if not miles_argv:
                sys.stderr.write(
                    "run needs miles's argv after --: run --config FILE -- python3 /root/miles/train.py ...\n"
                )
                return USAGE_EXIT
            config = load_run_config(args.config)
            options = RunOptions(
                metrics_addr=args.metrics_addr,
                preflight=PreflightEnv(paths=_paths(args)),
                skip_preflight=args.skip_preflight,
            )
            return run(config, miles_argv, options)
        if miles_argv is not None:
            sys.stderr.write(f"{args.command} takes no arguments after --\n")
            return USAGE_EXIT
        if args.command == "preflight":
            config = load_run_config(args.config)
            report = run_preflight(config.preflight, PreflightEnv(paths=_paths(args)), sys.stdout)
            print_report(report, sys.stdout)
            return 0 if report.ok else PREFLIGHT_FAILED_EXIT
        if args.command == "model-args":
            return _print_model_args(args.script)
        if args.command == "presave":
            return run_presave(args)
        if args.command == "provenance":
            sys.stdout.write(provenance_line(collect(ProvenanceSources())) + "\n")
            return 0
        return run_evaluate(args)
    except (ConfigError, StaleConfigError) as exc:
        sys.stdout.flush()
        sys.stderr.write(f"{exc}\n")
        return USAGE_EXIT
