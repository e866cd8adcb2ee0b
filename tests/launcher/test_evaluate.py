"""Offline evaluation against a stand-in SGLang server: scoring, pass@k, concurrency, readiness, aborts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from grpo_launcher.evaluate.client import ServerNotReadyError, wait_ready
from grpo_launcher.evaluate.dataset import DatasetError, load_items
from grpo_launcher.evaluate.scoring import parse_label, pass_at_k, score

from tests.support.launcher import launcher

from .sglang_standin import Behaviour, sglang_standin


def _data(tmp_path: Path, rows: list[dict[str, Any]]) -> Path:
    path = tmp_path / "aime-2024.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _chat(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def _evaluate(base_url: str, data: Path, out: Path, *extra: str) -> Any:
    return launcher(
        "evaluate",
        "--base-url",
        base_url,
        "--data",
        str(data),
        "--output",
        str(out),
        "--ready-timeout",
        "20",
        "--request-timeout",
        "30",
        *extra,
    )


@pytest.mark.parametrize(
    ("response", "label", "expected"),
    [
        ("so the answer is \\boxed{\\frac{1}{2}}", "0.5", True),  # equivalent, not string-equal
        ("\\boxed{\\frac{3}{4}}", "\\frac{3}{4}", True),  # nested braces
        ("Adding them up gives 33, so \\boxed{33}", "33", True),
        ("\\boxed{7} or maybe \\boxed{33}", "33", False),  # a hedge is a set {7, 33}, not a hit
        ("\\boxed{204}", "204", True),
        ("\\boxed{2}", "3", False),
        ("no final answer at all", "3", False),
    ],
)
def test_answers_are_scored_by_mathematical_equivalence(response: str, label: str, expected: bool) -> None:
    assert score(response, parse_label(label))[0] is expected


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [(4, 1, 1, 0.25), (4, 1, 4, 1.0), (4, 0, 4, 0.0), (16, 2, 8, 1 - 3003 / 12870), (16, 16, 1, 1.0)],
)
def test_pass_at_k_is_the_unbiased_estimator(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_with_k_above_n_is_refused() -> None:
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(2, 1, 4)


def test_pass_at_k_is_per_prompt_even_without_an_id_field(tmp_path: Path) -> None:
    """The seed keyed pass@k on a missing idx and reported 1.0 where the truth was 0.0333."""
    behaviour = Behaviour(
        answers={
            "p0": ["\\boxed{1}"],  # always right
            "p1": ["\\boxed{2}", "\\boxed{9}", "\\boxed{9}", "\\boxed{9}"],  # 1 of 4 right
            "p2": ["\\boxed{9}"],  # never right
        }
    )
    data = _data(tmp_path, [{"prompt": _chat(f"p{i}"), "label": i + 1} for i in range(3)])
    with sglang_standin(behaviour) as url:
        proc = _evaluate(url, data, tmp_path / "out.json", "--samples", "4", "--k", "1,4", "--concurrency", "3")
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["status"] == "completed"
    per_prompt = {p["index"]: p for p in result["prompts"]}
    assert [per_prompt[i]["correct"] for i in range(3)] == [4, 1, 0]
    assert per_prompt[1]["pass_at_k"] == {"1": 0.25, "4": 1.0}
    metrics = result["metrics"]
    assert metrics["accuracy"] == pytest.approx(5 / 12)
    assert metrics["pass_at_k"]["1"] == pytest.approx((1 + 0.25 + 0) / 3)
    assert metrics["pass_at_k"]["4"] == pytest.approx(2 / 3)
    assert behaviour.chat_calls == 12
    assert behaviour.bodies[0]["max_tokens"] == 16384
    assert proc.stdout.splitlines()[-1].startswith("evaluation completed: accuracy 0.4167, pass@1 0.4167")


def test_no_more_requests_are_in_flight_than_the_concurrency_bound(tmp_path: Path) -> None:
    behaviour = Behaviour(answers={"p": ["\\boxed{1}"]}, delay=0.05)
    data = _data(tmp_path, [{"prompt": "p", "label": "1"}] * 6)
    with sglang_standin(behaviour) as url:
        proc = _evaluate(url, data, tmp_path / "out.json", "--samples", "4", "--k", "1", "--concurrency", "3")
    assert proc.returncode == 0, proc.stderr
    assert behaviour.chat_calls == 24
    assert 1 <= behaviour.max_in_flight <= 3


def test_the_run_aborts_when_errors_pass_the_threshold(tmp_path: Path) -> None:
    behaviour = Behaviour(answers={"p": ["\\boxed{1}"]}, fail_every=3)
    data = _data(tmp_path, [{"prompt": "p", "label": "1"}] * 10)
    with sglang_standin(behaviour) as url:
        proc = _evaluate(url, data, tmp_path / "out.json", "--samples", "4", "--k", "1", "--concurrency", "2")
    assert proc.returncode == 1
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["status"] == "aborted"
    assert result["metrics"]["errors"] == 3  # 40 requests x 5% = 2 allowed; the third error aborts
    assert "HTTP 500" in result["errors"][0]
    assert "evaluation aborted: 3 of 40 requests failed" in proc.stderr


def test_errors_within_the_threshold_are_counted_and_the_run_completes(tmp_path: Path) -> None:
    behaviour = Behaviour(answers={"p": ["\\boxed{1}"]}, fail_every=20)
    data = _data(tmp_path, [{"prompt": "p", "label": "1"}] * 10)
    with sglang_standin(behaviour) as url:
        proc = _evaluate(url, data, tmp_path / "out.json", "--samples", "4", "--k", "1,2", "--concurrency", "1")
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((tmp_path / "out.json").read_text())["metrics"]
    assert metrics["errors"] == 2
    assert metrics["samples_scored"] == 38
    assert metrics["accuracy"] == 1.0


def test_responses_cut_at_max_tokens_are_counted(tmp_path: Path) -> None:
    behaviour = Behaviour(answers={"p": ["thinking..."]}, finish_reason="length")
    data = _data(tmp_path, [{"prompt": "p", "label": "1"}])
    with sglang_standin(behaviour) as url:
        proc = _evaluate(url, data, tmp_path / "out.json", "--samples", "2", "--k", "1")
    assert proc.returncode == 0
    assert json.loads((tmp_path / "out.json").read_text())["metrics"]["truncated"] == 2


def test_readiness_waits_through_503_while_the_server_starts() -> None:
    behaviour = Behaviour(health=[503, 503, 200])
    with sglang_standin(behaviour) as url:
        wait_ready(url, timeout=20, interval=0.01)
    assert behaviour.health_calls == 3


@pytest.mark.parametrize("status", [500, 404, 401])
def test_readiness_fails_at_once_on_other_http_errors(status: int) -> None:
    behaviour = Behaviour(health=[status])
    with sglang_standin(behaviour) as url, pytest.raises(ServerNotReadyError, match=f"answered HTTP {status}"):
        wait_ready(url, timeout=20, interval=0.01)
    assert behaviour.health_calls == 1


def test_readiness_gives_up_at_the_deadline_with_the_last_answer() -> None:
    with sglang_standin(Behaviour(health=[503])) as url, pytest.raises(ServerNotReadyError, match="HTTP 503"):
        wait_ready(url, timeout=0.2, interval=0.05)


def test_an_unreachable_server_fails_the_evaluation_with_exit_1(tmp_path: Path) -> None:
    with sglang_standin(Behaviour()) as url:
        pass  # the port is closed again
    data = _data(tmp_path, [{"prompt": "p", "label": "1"}])
    proc = launcher(
        "evaluate",
        "--base-url",
        url,
        "--data",
        str(data),
        "--output",
        str(tmp_path / "o.json"),
        "--ready-timeout",
        "0.3",
        "--samples",
        "1",
        "--k",
        "1",
    )
    assert proc.returncode == 1
    assert "server not ready" in proc.stderr
    assert "connection failed" in proc.stderr


def test_a_row_without_the_label_key_names_the_line(tmp_path: Path) -> None:
    path = _data(tmp_path, [{"prompt": "p", "label": "1"}, {"prompt": "q", "answer": "2"}])
    with pytest.raises(DatasetError, match=r"line 2 has no 'label' key \(keys: answer, prompt\)"):
        load_items(path)


def test_numeric_labels_and_string_prompts_are_accepted(tmp_path: Path) -> None:
    items = load_items(_data(tmp_path, [{"prompt": "What is 1+1?", "label": 2}]))
    assert items[0].label == "2"
    assert items[0].messages == ({"role": "user", "content": "What is 1+1?"},)


def test_k_larger_than_the_samples_is_a_usage_error(tmp_path: Path) -> None:
    data = _data(tmp_path, [{"prompt": "p", "label": "1"}])
    proc = launcher(
        "evaluate",
        "--base-url",
        "http://127.0.0.1:9",
        "--data",
        str(data),
        "--output",
        str(tmp_path / "o"),
        "--samples",
        "4",
        "--k",
        "1,8",
    )
    assert proc.returncode == 2
    assert "every k must be <= --samples 4" in proc.stderr


SLOW_GRAMMAR = """
import time
import math_verify.parser as parser

real, calls = parser.latex2sympy, []


def slow_first_use(*args, **kwargs):  # the grammar's first load on a node busy with other work
    if not calls:
        time.sleep(6)  # over math_verify's 5 s parsing limit
    calls.append(1)
    return real(*args, **kwargs)


parser.latex2sympy = slow_first_use
from grpo_launcher.evaluate.scoring import parse_label, score

print(score("so the answer is \\\\boxed{\\\\frac{1}{2}}", parse_label("\\\\frac{1}{2}"))[0])
"""


def test_a_slow_first_parse_on_a_busy_node_does_not_score_the_first_answer_wrong() -> None:
    """The grammar's one-time load is not bounded by the per-answer parsing limit: before the warm-up, a load
    slower than 5 s made the first label unparseable and every answer to that prompt wrong."""
    result = subprocess.run(
        [sys.executable, "-c", SLOW_GRAMMAR], check=False, capture_output=True, text=True, timeout=120
    )
    assert result.stdout.strip() == "True", result.stderr[-2000:]
