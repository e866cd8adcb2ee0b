"""`make mutation` run on a one-file project of its own: what it reports for a mutant a user of the tool would
otherwise misread.

It caps each mutant's memory: a mutant that allocates without bound (a loop whose counter no
longer moves) is recorded killed by the memory limit and the run goes on to the next mutant, instead of
growing until the kernel's OOM killer ends some process of the machine (it took a kubelet once). The project's
loop stops itself at about 1 GiB so that even a tool without the
cap cannot take the machine's memory. The mutant fills memory with small objects, as the flags.py one did, and
still holds them when its test fails: the child must give its verdict with almost no memory left.

A mutant that loops without end is stopped in the first test that reaches it, by CPU time, and that test is
named. A mutant of a `functools.cache`d function runs every test that calls the function, not only the first one
(whose call filled the cache before the others ran). A mutant under which a test's process dies of a signal is
"crashed", a kill that names the test and the signal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from grpo_dev.mutation.__main__ import in_lines, report
from grpo_dev.mutation.mutants import mutants_of

DEVTOOLS = Path(__file__).resolve().parents[2] / "devtools"
GROW = '''"""Chunks of memory."""


def grow(n: int) -> int:
    chunks = []
    i = 0
    while i < n and len(chunks) < 5_000_000:  # about 1 GiB at most: the test's own guard, not the tool's
        chunks.append(bytearray(100))
        i += 1
    return len(chunks)
'''
GROW_TEST = """from fakepkg.grow import grow


def test_three_chunks():
    assert grow(3) == 3
"""
COUNT = '''"""A counter."""


def count(n: int) -> int:
    i = 0
    while i < n:
        i += 1
    return i
'''
COUNT_TEST = """from fakepkg.grow import count


def test_count():
    assert count(3) == 3
"""
TABLE = '''"""A table."""

TABLE = {"a": 1}
'''
TABLE_TEST = """from fakepkg.grow import TABLE


def test_a():
    assert TABLE["a"] == 1
"""
CRASH = '''"""A check that crashes its process below a floor."""

import os
import signal


def check(n: int) -> int:
    if n < 1:
        os.kill(os.getpid(), signal.SIGSEGV)
    return n
'''
CRASH_TEST = """from fakepkg.grow import check


def test_one():
    assert check(1) == 1
"""
CACHED = '''"""A table read once."""

from functools import cache


@cache
def table() -> dict[str, int]:
    return {"a": 1, "b": 2}
'''
CACHED_TEST = """from fakepkg.grow import table


def test_b():
    assert table()["b"] == 2


def test_a():
    assert table()["a"] == 1
"""


def _run_tool(
    project: Path, source: str, tests: str, memory_limit: int = 0, cpu_seconds: float = 30
) -> dict[str, dict[str, object]]:
    (project / "fakepkg").mkdir()
    (project / "fakepkg" / "__init__.py").write_text("")
    (project / "fakepkg" / "grow.py").write_text(source)
    (project / "test_grow.py").write_text(tests)
    mutants = mutants_of("fakepkg/grow.py", source.encode())
    plan = project / "plan.json"
    results = project / "results.json"
    plan.write_text(
        json.dumps(
            {
                "mutants": [asdict(m) for m in mutants],
                "modules": {str(project / "fakepkg" / "grow.py"): "fakepkg.grow"},
                "source_dirs": [str(project / "fakepkg")],
                "coverage_cache": str(project / "coverage.json"),
                "results": str(results),
                "jobs": 1,
                "memory_limit": memory_limit,
                "cpu_seconds": cpu_seconds,
            }
        )
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(project), str(DEVTOOLS)])}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "grpo_dev.mutation.plugin"]
    # The timeout only keeps a broken tool from hanging the suite; no verdict depends on how long it took.
    subprocess.run(
        [*command, f"--mutation-plan={plan}", "test_grow.py"], cwd=project, env=env, check=False, timeout=300
    )
    return {str(r["description"]): r for r in json.loads(results.read_text())["results"]}


def test_a_mutant_that_allocates_without_bound_is_killed_by_the_memory_limit(tmp_path: Path) -> None:
    results = _run_tool(tmp_path, GROW, GROW_TEST, memory_limit=512 * 2**20)

    endless = results["fakepkg/grow.py:9: remove: 'i += 1' -> 'pass'"]
    assert endless["status"] == "memory limit"
    assert endless["by"] == "test_grow.py::test_three_chunks"
    # The run went on after it: every mutant has a verdict, and the others are judged as usual.
    assert all(r["status"] != "running" for r in results.values())
    assert results["fakepkg/grow.py:8: remove: 'chunks.append(bytearray(100))' -> 'pass'"]["status"] == "killed"
    assert results["fakepkg/grow.py:7: constant: '5_000_000' -> '5000001'"]["status"] == "survived"


def test_a_mutant_stopped_by_the_memory_limit_counts_as_killed_and_is_no_survivor(tmp_path: Path) -> None:
    results: list[dict[str, object]] = [
        {"key": "a", "path": "x.py", "line": 1, "description": "x.py:1: endless", "status": "memory limit"},
        {"key": "b", "path": "x.py", "line": 2, "description": "x.py:2: slow", "status": "timeout"},
        {"key": "c", "path": "x.py", "line": 3, "description": "x.py:3: caught", "status": "killed"},
        {"key": "d", "path": "x.py", "line": 4, "description": "x.py:4: missed", "status": "survived"},
    ]
    survivors = tmp_path / "survivors.txt"

    assert report(results, survivors) == 75.0
    assert survivors.read_text() == "survived: x.py:4: missed\n"


def test_a_mutant_of_a_cached_function_is_killed_by_a_later_test_that_calls_it(tmp_path: Path) -> None:
    results = _run_tool(tmp_path, CACHED, CACHED_TEST)

    changed_a = results["fakepkg/grow.py:8: constant: '1' -> '2'"]
    assert (changed_a["status"], changed_a["by"]) == ("killed", "test_grow.py::test_a")


def test_an_endless_loop_is_a_timeout_in_the_test_that_reached_it(tmp_path: Path) -> None:
    results = _run_tool(tmp_path, COUNT, COUNT_TEST, cpu_seconds=2)

    endless = results["fakepkg/grow.py:7: remove: 'i += 1' -> 'pass'"]
    assert (endless["status"], endless["by"]) == ("timeout", "test_grow.py::test_count")
    assert results["fakepkg/grow.py:8: return: 'i' -> 'None'"]["by"] == "test_grow.py::test_count"


def test_a_mutant_whose_test_process_dies_of_a_signal_is_crashed_counts_as_killed_and_names_the_test(
    tmp_path: Path,
) -> None:
    results = _run_tool(tmp_path, CRASH, CRASH_TEST)

    crashed = [r for r in results.values() if r["status"] == "crashed"]
    assert crashed, results
    assert {r["by"] for r in crashed} == {"test_grow.py::test_one: died of SIGSEGV"}, crashed
    assert report(list(results.values()), tmp_path / "survivors.txt") == 100.0 * sum(
        r["status"] != "survived" for r in results.values()
    ) / len(results)
    assert "crashed" not in (tmp_path / "survivors.txt").read_text()


def test_lines_pick_a_part_of_a_long_file() -> None:
    assert [n for n in range(1, 8) if in_lines(n, "3-5")] == [3, 4, 5]
    assert [n for n in range(1, 8) if in_lines(n, "5-")] == [5, 6, 7]
    assert [n for n in range(1, 8) if in_lines(n, "-2")] == [1, 2]
    assert [n for n in range(1, 8) if in_lines(n, "4")] == [4]
    assert [n for n in range(1, 8) if in_lines(n, "")] == [1, 2, 3, 4, 5, 6, 7]


def test_a_mutant_of_a_table_is_killed_by_a_test_that_only_reads_it(tmp_path: Path) -> None:
    results = _run_tool(tmp_path, TABLE, TABLE_TEST)

    changed = results["fakepkg/grow.py:3: constant: '1' -> '2'"]
    assert (changed["status"], changed["by"]) == ("killed", "test_grow.py::test_a")
