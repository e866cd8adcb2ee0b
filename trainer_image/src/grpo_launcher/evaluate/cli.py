"""``python -m grpo_launcher evaluate``: arguments, the readiness wait, the run, the JSON result.

Exit codes: 0 completed; 1 the server was not ready or the run aborted on errors (the JSON result is still
written when the run started); 2 bad arguments or data. The last line printed says what happened.
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path

from grpo_launcher.evaluate.client import SamplingParams, ServerNotReadyError, chat, wait_ready
from grpo_launcher.evaluate.dataset import DatasetError, load_items
from grpo_launcher.evaluate.runner import EvalSettings, evaluate

FAILED_EXIT = 1
USAGE_EXIT = 2


def _ks(text: str) -> tuple[int, ...]:
    try:
        values = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--k {text!r}: must be comma-separated positive integers") from None
    if not values or values[0] < 1:
        raise argparse.ArgumentTypeError(f"--k {text!r}: must be comma-separated positive integers")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--base-url", required=True, help="SGLang server, e.g. http://127.0.0.1:30000")
    parser.add_argument("--model", default="default", help="model name sent in requests (%(default)s)")
    parser.add_argument("--data", type=Path, required=True, help="JSONL with prompt and label per line")
    parser.add_argument("--input-key", default="prompt")
    parser.add_argument("--label-key", default="label")
    parser.add_argument("--samples", type=int, default=16, help="samples per prompt (%(default)s)")
    parser.add_argument("--k", type=_ks, default=(1, 8, 16), help="pass@k values, e.g. 1,8,16")
    parser.add_argument("--concurrency", type=int, default=64, help="requests in flight at most (%(default)s)")
    parser.add_argument("--max-tokens", type=int, default=16384)
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--top-p", type=float, default=0.95)
    parser.add_argument("--request-timeout", type=float, default=3600, help="seconds per generation request")
    parser.add_argument("--ready-timeout", type=float, default=600, help="seconds to wait for /health")
    parser.add_argument("--max-error-fraction", type=float, default=0.05, help="abort above this (%(default)s)")
    parser.add_argument("--output", type=Path, required=True, help="where the JSON result is written")


def _validate(args: argparse.Namespace) -> str:
    if args.samples < 1:
        return f"--samples {args.samples}: must be at least 1"
    if max(args.k) > args.samples:
        return f"--k {','.join(map(str, args.k))}: every k must be <= --samples {args.samples}"
    if args.concurrency < 1:
        return f"--concurrency {args.concurrency}: must be at least 1"
    if not 0 <= args.max_error_fraction < 1:
        return f"--max-error-fraction {args.max_error_fraction}: must be in [0, 1)"
    if not str(args.base_url).startswith(("http://", "https://")):
        return f"--base-url {args.base_url!r}: must start with http:// or https://"
    return ""


def run_from_args(args: argparse.Namespace) -> int:
    problem = _validate(args)
    if problem:
        sys.stderr.write(problem + "\n")
        return USAGE_EXIT
    try:
        items = load_items(args.data, args.input_key, args.label_key)
    except DatasetError as exc:
        sys.stderr.write(f"evaluation data: {exc}\n")
        return USAGE_EXIT
    try:
        waited = wait_ready(args.base_url, args.ready_timeout)
    except ServerNotReadyError as exc:
        sys.stderr.write(f"evaluation failed: server not ready: {exc}\n")
        return FAILED_EXIT
    print(f"[info] server ready after {waited:.1f} s; {len(items)} prompts x {args.samples} samples", flush=True)
    params = SamplingParams(args.max_tokens, args.temperature, args.top_p)
    settings = EvalSettings(args.samples, args.k, args.concurrency, args.max_error_fraction, params)
    chat_fn = partial(chat, args.base_url, args.model, params=params, timeout=args.request_timeout)
    result = evaluate(items, settings, chat_fn)
    result["server"] = {"base_url": args.base_url, "model": args.model, "ready_after_s": round(waited, 2)}
    result["settings"] = {
        "data": str(args.data),
        "samples": args.samples,
        "k": list(args.k),
        "concurrency": args.concurrency,
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "max_error_fraction": args.max_error_fraction,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    metrics = result["metrics"]
    if result["status"] != "completed":
        sys.stderr.write(f"evaluation aborted: {result['reason']}; partial result in {args.output}\n")
        return FAILED_EXIT
    passes = ", ".join(
        f"pass@{k} {v:.4f}" if v is not None else f"pass@{k} n/a" for k, v in metrics["pass_at_k"].items()
    )
    print(
        f"evaluation completed: accuracy {metrics['accuracy']:.4f}, {passes}; result in {args.output}",
        flush=True,
    )
    return 0
