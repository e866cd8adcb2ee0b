"""`make mutation`: mutation testing of the pure core and the reward path, over the unit tier only.

    python -m grpo_dev.mutation [--modules planning,render] [--jobs 1] [--only FILE] [--survivors] [--out FILE]
                                [--memory-gib 4] [--lines 474-]

Each group names the files it mutates and the unit tests that may reach them (paths that do not exist
are skipped; integration and slow tests are deselected). One pytest session per group runs its mutants
(`grpo_dev.mutation.plugin`); this prints killed and survived per module, the kill rate (killed, timed out
and out of memory over all mutants; a mutant no test reaches counts as survived), and writes every survivor,
one a line, to `--out`. Each mutant's process may use `--memory-gib` of address space: one that allocates
without bound fails there and counts as killed ("memory limit"), like one that runs past its time limit
("timeout") or whose test process dies of a signal ("crashed"). Results per group stay in `.mutation/<group>.json`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

from grpo_dev.mutation.mutants import mutants_of

REPO = Path(__file__).resolve().parents[3]
SOURCE_ROOTS = {
    "operator": "grpo_operator",
    "reward_service/src": "reward_service",
    "trainer_image/src": "grpo_launcher",
}
OPERATOR = "operator/grpo_operator"
LAUNCHER = "trainer_image/src/grpo_launcher"
REWARD = "reward_service/src/reward_service"
KILLS = (
    "killed",
    "timeout",
    "memory limit",
    "crashed",
)  # the statuses of a mutant that a test, a limit or a crash stopped


@dataclass(frozen=True)
class Group:
    sources: tuple[str, ...]  # files or folders, relative to the repository
    tests: tuple[str, ...]


GROUPS = {
    "planning": Group((f"{OPERATOR}/planning",), ("tests/planning", "tests/api", "tests/render")),
    # render/names.py makes the Ray job ids the status tracks: the attempts tests hold that rule.
    # render/yamlout.py quotes what kubectl would read as another type: the cli tests read it back as kubectl does.
    "render": Group(
        (f"{OPERATOR}/render",),
        ("tests/render", "tests/status/test_attempts.py", "tests/cli/test_reads_what_kubectl_sends.py"),
    ),
    # planning's tests validate specs; the reward types' tests hold each reward's score range.
    "api": Group((f"{OPERATOR}/api",), ("tests/api", "tests/planning", "tests/render/test_reward_types.py")),
    "cli": Group((f"{OPERATOR}/cli",), ("tests/cli",)),
    # The launcher writes the end-of-run summary line that status/summary.py reads: its tests round-trip it.
    "status": Group((f"{OPERATOR}/status",), ("tests/status", "tests/launcher/test_summary.py")),
    "launcher": Group(
        (f"{LAUNCHER}/summary.py", f"{LAUNCHER}/reward_client.py"),
        ("tests/launcher/test_summary.py", "tests/launcher/test_reward_client_policy.py", "tests/launcher"),
    ),
    # The reward client alone, with only its own tests: the rest of tests/launcher starts processes that never
    # load it, and a test that starts a process runs for every surviving mutant.
    "reward_client": Group(
        (f"{LAUNCHER}/reward_client.py",),
        (
            "tests/launcher/test_reward_client_policy.py",
            "tests/launcher/test_reward_client_hostile.py",
            "tests/launcher/test_reward_client_retries.py",
        ),
    ),
    "reward": Group(
        (f"{REWARD}/cache.py", f"{REWARD}/extraction.py", f"{REWARD}/worker.py", f"{REWARD}/app.py"),
        ("tests/reward_service",),
    ),
}


def module_name(path: Path) -> str:
    relative = path.relative_to(REPO).as_posix()
    for root in SOURCE_ROOTS:
        if relative.startswith(root + "/"):
            dotted = relative[len(root) + 1 : -len(".py")].replace("/", ".")
            return dotted.removesuffix(".__init__")
    raise ValueError(f"{relative} is under none of {sorted(SOURCE_ROOTS)}")


def files_of(group: Group) -> list[Path]:
    out: list[Path] = []
    for source in group.sources:
        path = REPO / source
        out += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return out


def in_lines(line: int, lines: str) -> bool:
    """Whether `line` lies in `lines`, written LINE, FIRST-LAST, FIRST- or -LAST (both ends included); empty: all."""
    if not lines:
        return True
    first, dash, last = lines.partition("-")
    if not dash:
        return line == int(first)
    return int(first or 1) <= line <= (int(last) if last else line)


def _previous(results: Path) -> list[dict[str, object]]:
    if not results.exists():
        raise SystemExit(f"mutation: --survivors needs an earlier run's {results}")
    data: list[dict[str, object]] = json.loads(results.read_text())["results"]
    return data


def run_group(
    name: str,
    group: Group,
    jobs: int,
    state: Path,
    *,
    only: str,
    report_only: bool,
    survivors: bool = False,
    memory_limit: int = 0,
    lines: str = "",
) -> list[dict[str, object]]:
    files = [f for f in files_of(group) if only in f.relative_to(REPO).as_posix()]
    mutants = [m for f in files for m in mutants_of(f.relative_to(REPO).as_posix(), f.read_bytes())]
    mutants = [m for m in mutants if in_lines(m.line, lines)]
    plan = state / f"{name}.plan.json"
    results = state / f"{name}.json"
    earlier: list[dict[str, object]] = []
    if survivors and not report_only:
        # Only the earlier run's survivors run again (a new test can only kill more); the sources must be
        # unchanged, or their mutants' keys would not match.
        earlier = _previous(results)
        alive = {r["key"] for r in earlier if r["status"] not in KILLS}
        mutants = [m for m in mutants if m.key in alive]
        results = state / f"{name}.survivors.json"
    if not report_only:
        plan.write_text(
            json.dumps(
                {
                    "mutants": [asdict(m) for m in mutants],
                    "modules": {str(f): module_name(f) for f in files},
                    "source_dirs": [str(REPO / root) for root in SOURCE_ROOTS],
                    "coverage_cache": str(state / f"{name}.coverage.json"),
                    "results": str(results),
                    "jobs": jobs,
                    "memory_limit": memory_limit,
                }
            )
        )
    tests = [t for t in dict.fromkeys(group.tests) if (REPO / t).exists()]
    print(f"mutation: {name}: {len(mutants)} mutants of {len(files)} files; tests from {', '.join(tests)}", flush=True)
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-s",
        "-p",
        "no:cacheprovider",
        "-p",
        "grpo_dev.mutation.plugin",
        f"--mutation-plan={plan}",
        "-m",
        "not integration and not slow",
        # Its tests run the grpo command in a child, which the in-process coverage map cannot see.
        "--ignore=tests/cli/test_cli_hostile.py",
        *tests,
    ]
    if not report_only:
        subprocess.run(command, cwd=REPO, check=False)
    if not results.exists():
        raise SystemExit(f"mutation: {name}: no results (see the pytest output above)")
    data: list[dict[str, object]] = json.loads(results.read_text())["results"]
    if earlier:
        again = {r["key"]: r for r in data}
        data = [again.get(str(r["key"]), r) for r in earlier]
        (state / f"{name}.json").write_text(json.dumps({"results": data}, indent=1))
    return data


def report(results: list[dict[str, object]], out: Path) -> float:
    per_file: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in results:
        per_file[str(r["path"])][str(r["status"])] += 1
    rows = [("module", "mutants", "killed", "survived", "no tests", "kill rate")]
    total_killed = total = 0
    for path, counts in sorted(per_file.items()):
        killed = sum(counts[status] for status in KILLS)
        n = sum(counts.values())
        total_killed += killed
        total += n
        survived = n - killed - counts["no tests"]
        rows.append((path, str(n), str(killed), str(survived), str(counts["no tests"]), f"{100 * killed / n:.1f}%"))
    rate = 100 * total_killed / total if total else 100.0
    rows.append(("all", str(total), str(total_killed), "", "", f"{rate:.1f}%"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    survivors = sorted(
        (r for r in results if r["status"] not in KILLS),
        key=lambda r: (str(r["path"]), int(str(r["line"]))),
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(f"{r['status']}: {r['description']}\n" for r in survivors))
    print(f"mutation: {len(survivors)} survivors written to {out}")
    return rate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grpo_dev.mutation", description=__doc__.splitlines()[0])
    parser.add_argument("--modules", default=",".join(GROUPS), help=f"comma-separated, of {', '.join(GROUPS)}")
    parser.add_argument("--jobs", type=int, default=1, help="mutants run at once (one process each)")
    parser.add_argument("--only", default="", help="mutate only the files whose path contains this text")
    parser.add_argument(
        "--lines",
        default="",
        help="mutate only these lines of the files, e.g. 474-, 10-80 or 12 (a long file in parts)",
    )
    parser.add_argument("--report", action="store_true", help="print the table of the last run, run nothing")
    parser.add_argument(
        "--survivors", action="store_true", help="run again only the last run's survivors (sources unchanged)"
    )
    parser.add_argument("--out", type=Path, default=REPO / ".mutation" / "survivors.txt")
    parser.add_argument(
        "--memory-gib",
        type=float,
        default=4.0,
        help="address space each mutant's process may use (a mutant that needs more is killed); 0: no cap",
    )
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.modules.split(",") if n.strip()]
    unknown = [n for n in names if n not in GROUPS]
    if unknown:
        parser.error(f"unknown module group(s) {', '.join(unknown)}; choose from {', '.join(GROUPS)}")
    state = REPO / ".mutation"
    state.mkdir(exist_ok=True)
    results: list[dict[str, object]] = []
    for name in names:
        results += run_group(
            name,
            GROUPS[name],
            args.jobs,
            state,
            only=args.only,
            report_only=args.report,
            survivors=args.survivors,
            memory_limit=int(args.memory_gib * 2**30),
            lines=args.lines,
        )
    report(results, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
