"""The pytest plugin that runs the mutants: collect once, fork per mutant, run only the tests that reach it.

Loaded by `python -m grpo_dev.mutation` with `-p grpo_dev.mutation.plugin --mutation-plan PLAN`. It replaces
pytest's test loop: the tests are collected once, in this process; a forked child runs them all with a
profiler that records which functions of the mutated files each test calls (the coverage map, cached by
the content of the sources and tests); then every mutant is run in a forked child of its own, which changes
the code in memory and runs only the tests that reach the change, fastest first, stopping at the first
failure. The parent never runs a test, so every child starts from the same clean state.

A change inside a function replaces that function's code object (`__code__`), which every reference to the
function sees. A change outside every function (a constant, a class body, a default) executes the mutated
module again in its own namespace, then the modules that import it, and rebinds the names other modules and
tests imported from them. A process a test starts (a spawned or forkserver worker, a subprocess) imports the
code from disk: the child puts a copy of the mutated package first on its path, and the tests that start
processes run for every mutant, after the ones the map names. Hypothesis runs derandomized, without its database or deadline, so a mutant's
verdict does not depend on the run. Each mutant's child has its address space capped (RLIMIT_AS, inherited by
the processes it starts): a mutant that allocates without bound (a loop whose counter no longer moves) fails
its allocation with MemoryError and is recorded killed by the memory limit, instead of filling the machine's
memory until the kernel's OOM killer picks some process, not necessarily this one.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import resource
import shutil
import signal
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from _pytest.runner import runtestprotocol
from hypothesis import HealthCheck, settings

from grpo_dev.mutation.mutants import Mutant

SURVIVED, KILLED, ERROR, OUT_OF_MEMORY = 0, 1, 3, 4
STATUSES = {SURVIVED: "survived", KILLED: "killed", OUT_OF_MEMORY: "memory limit"}
CHILD = "<a child process>"  # the coverage map's mark for a test that starts a process (spawn, forkserver, exec)
_LAUNCHERS = ("_launch", "_execute_child")  # multiprocessing's popen_spawn/popen_forkserver, subprocess.Popen
_UNWRAP = ("fget", "fset", "fdel", "__func__", "__wrapped__", "func", "wrapped")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--mutation-plan", default=None, help="JSON plan written by python -m grpo_dev.mutation")


@dataclass
class Plan:
    mutants: list[Mutant]
    modules: dict[str, str]  # absolute file -> dotted module name
    source_dirs: list[str]  # where the project's code lives: the coverage map records calls into these
    coverage_cache: Path
    results: Path
    jobs: int
    memory_limit: int = 0  # bytes of address space a mutant's child may have; 0: no cap
    cpu_seconds: float = 30  # CPU a test may use on top of ten times its time in the map

    @classmethod
    def load(cls, path: str) -> Plan:
        data = json.loads(Path(path).read_text())
        return cls(
            mutants=[Mutant(**m) for m in data["mutants"]],
            modules=data["modules"],
            source_dirs=data["source_dirs"],
            coverage_cache=Path(data["coverage_cache"]),
            results=Path(data["results"]),
            jobs=int(data["jobs"]),
            memory_limit=int(data.get("memory_limit", 0)),
            cpu_seconds=float(data.get("cpu_seconds", 30)),
        )


def _say(text: str) -> None:
    sys.__stdout__.write(text + "\n")  # type: ignore[union-attr]
    sys.__stdout__.flush()  # type: ignore[union-attr]


def _quiet_hypothesis() -> None:
    settings.register_profile(
        "mutation", database=None, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck)
    )
    settings.load_profile("mutation")


def _run_items(items: list[pytest.Item]) -> Iterator[tuple[pytest.Item, bool]]:
    for item, reports in _run_reports(items):
        yield item, not any(r.failed for r in reports)


def _run_reports(
    items: list[pytest.Item], cpu_limits: list[float] | None = None, verdict: Path | None = None
) -> Iterator[tuple[pytest.Item, list[pytest.TestReport]]]:
    for i, item in enumerate(items):
        nextitem = items[i + 1] if i + 1 < len(items) else None
        if verdict is not None:
            verdict.write_text(item.nodeid)  # the test that was running, if a limit ends the process
        if cpu_limits is not None:
            # SIGVTALRM's default action ends the process, even inside a loop in C: the parent reads that
            # as a timeout. CPU time, not wall time, so a loaded machine or a test waiting on a process does
            # not trip it; SIGALRM stays free for the code under test (the reward worker's budget uses it).
            signal.setitimer(signal.ITIMER_VIRTUAL, cpu_limits[i])
        reports = runtestprotocol(item, nextitem=nextitem, log=False)
        if cpu_limits is not None:
            signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        yield item, reports


def _out_of_memory(reports: list[pytest.TestReport]) -> bool:
    """Whether a test failed because an allocation hit the memory limit (the exception it ended with)."""
    for report in reports:
        crash = getattr(report.longrepr, "reprcrash", None)
        if report.failed and str(getattr(crash, "message", "")).startswith("MemoryError"):
            return True
    return False


def _cap_memory(limit: int) -> None:
    """Cap this process's address space, and that of every process it starts, at `limit` bytes."""
    if limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _silence() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)


def _top_scope(qualname: str) -> str:
    return qualname.split(".<locals>", maxsplit=1)[0]


# --- coverage ------------------------------------------------------------------------------------------
def _coverage_key(plan: Plan, items: list[pytest.Item]) -> str:
    digest = hashlib.sha256()
    sources = [str(p) for d in plan.source_dirs for p in sorted(Path(d).rglob("*.py"))]
    files = sorted(set(sources) | {str(item.path) for item in items} | {__file__})  # this file decides the map too
    for name in files:
        digest.update(name.encode() + b"\0" + Path(name).read_bytes())
    for item in items:
        digest.update(item.nodeid.encode())
    return digest.hexdigest()


def _clear_caches(source_dirs: tuple[str, ...]) -> None:
    """Empty the `functools.cache` of every module-level function of the project's modules."""
    for module in list(sys.modules.values()):
        if not (getattr(module, "__file__", None) or "").startswith(source_dirs):
            continue
        for value in list(vars(module).values()):
            clear = getattr(value, "cache_clear", None)
            if callable(clear) and getattr(value, "__module__", None) == module.__name__:
                clear()


def _measure(items: list[pytest.Item], source_dirs: tuple[str, ...], out: Path) -> None:
    """In a child: run every test under a profiler; write {nodeid: [passed, seconds, [file, scope]...]}."""
    current: set[tuple[str, str]] = set()

    def profile(frame: types.FrameType, event: str, arg: object) -> None:
        if event == "call":
            code = frame.f_code
            if code.co_filename.startswith(source_dirs):
                current.add((code.co_filename, _top_scope(code.co_qualname)))
            elif code.co_name in _LAUNCHERS and (
                "multiprocessing" in code.co_filename or "subprocess" in code.co_filename
            ):
                current.add((CHILD, CHILD))

    result: dict[str, Any] = {}
    _clear_caches(source_dirs)
    sys.setprofile(profile)
    threading.setprofile(profile)
    started = time.monotonic()
    for item, passed in _run_items(items):
        now = time.monotonic()
        result[item.nodeid] = [passed, now - started, sorted(current)]
        current.clear()
        started = now
        # A test may set a profiler of its own and clear it after (tests/planning/test_plan_once.py counts the
        # calls into plan.py so): re-arm ours before the next test, or every later test maps to no function
        # and no mutant runs it.
        sys.setprofile(profile)
        threading.setprofile(profile)
        # A cached function's body runs only for the first test that calls it, so the map would give its
        # mutants only that test (miles_parser.py's miles_flags): every test starts with the caches empty.
        _clear_caches(source_dirs)
    sys.setprofile(None)
    out.write_text(json.dumps(result))


def coverage_map(plan: Plan, items: list[pytest.Item]) -> dict[str, Any]:
    key = _coverage_key(plan, items)
    if plan.coverage_cache.exists():
        cached = json.loads(plan.coverage_cache.read_text())
        if cached.get("key") == key:
            _say(f"mutation: coverage map from {plan.coverage_cache} (sources and tests unchanged)")
            return dict(cached["tests"])
    _say(f"mutation: running {len(items)} tests once to map which tests reach which functions")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "coverage.json"
        pid = os.fork()
        if pid == 0:
            try:
                _silence()
                _measure(items, tuple(d.rstrip("/") + "/" for d in plan.source_dirs), out)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        if not out.exists():
            raise pytest.UsageError("mutation: the coverage run died; run the tests on their own first")
        tests = json.loads(out.read_text())
    plan.coverage_cache.parent.mkdir(parents=True, exist_ok=True)
    plan.coverage_cache.write_text(json.dumps({"key": key, "tests": tests}))
    return dict(tests)


# --- applying a mutant in the child --------------------------------------------------------------------
def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield const
            yield from _codes(const)


def _functions(obj: object, qualname: str) -> list[types.FunctionType]:
    found, stack, seen = [], [obj], set()
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, types.FunctionType) and current.__code__.co_qualname == qualname:
            found.append(current)
        stack += [getattr(current, a) for a in _UNWRAP if getattr(current, a, None) is not None]
    return found


def _swap_code(module: types.ModuleType, mutated: types.CodeType, scope: str) -> bool:
    """Give the live function named `scope` the mutated code; False when that cannot be done exactly."""
    codes = [c for c in _codes(mutated) if c.co_qualname == scope]
    owner: object = module
    *path, name = scope.split(".")
    for part in path:
        owner = vars(owner).get(part) if hasattr(owner, "__dict__") else None
    live = vars(owner).get(name) if owner is not None and hasattr(owner, "__dict__") else None
    functions = _functions(live, scope) if live is not None else []
    if len(codes) != 1 or len(functions) != 1:
        return False
    try:
        functions[0].__code__ = codes[0]
    except ValueError:  # a different closure
        return False
    for wrapper in (live, getattr(live, "fget", None)):
        clear: Callable[[], None] | None = getattr(wrapper, "cache_clear", None)
        if clear is not None:
            clear()
    return True


def _imports(path: str) -> set[str]:
    tree = ast.parse(Path(path).read_bytes())
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
            out |= {f"{node.module}.{alias.name}" for alias in node.names}
    return out


def dependents(module: str, loaded: dict[str, types.ModuleType], roots: tuple[str, ...]) -> list[str]:
    """The loaded project modules that import `module`, directly or not, each after what it imports."""
    files = {name: getattr(m, "__file__", None) for name, m in loaded.items() if name.split(".")[0] in roots}
    graph = {name: _imports(f) & set(files) for name, f in files.items() if f and f.endswith(".py")}
    affected = {module}
    changed = True
    while changed:
        changed = False
        for name, deps in graph.items():
            if name not in affected and deps & affected:
                affected.add(name)
                changed = True
    order: list[str] = []

    def visit(name: str, trail: frozenset[str]) -> None:
        if name in order or name in trail:
            return
        for dep in sorted(graph.get(name, set()) & affected):
            visit(dep, trail | {name})
        order.append(name)

    for name in sorted(affected):
        visit(name, frozenset())
    return [name for name in order if name != module]


def _rerun_modules(module: str, mutated: bytes, roots: tuple[str, ...], repo: str) -> None:
    loaded = dict(sys.modules)
    replaced: dict[tuple[str, int], object] = {}
    keep: list[dict[str, Any]] = []  # the old objects stay alive so their ids stay unique
    for name in [module, *dependents(module, loaded, roots)]:
        target = loaded[name]
        path = target.__file__ or ""
        source = mutated if name == module else Path(path).read_bytes()
        namespace = vars(target)
        old = dict(namespace)
        keep.append(old)
        exec(compile(source, path, "exec", dont_inherit=True), namespace)  # noqa: S102 - the project's own code
        for key, value in namespace.items():
            if key in old and old[key] is not value:
                replaced[(key, id(old[key]))] = value
    for other in list(sys.modules.values()):
        if not (getattr(other, "__file__", None) or "").startswith(repo):
            continue
        for key, value in list(vars(other).items()):
            new = replaced.get((key, id(value)))
            if new is not None:
                setattr(other, key, new)


def _overlay(file: str, module_name: str, mutated: bytes, where: Path) -> None:
    """A copy of the mutated file's top package, first on the path of every process this child starts: a
    spawned or forkserver worker, or a subprocess, imports the code from disk, not from this memory."""
    root = module_name.split(".", maxsplit=1)[0]
    package = next(p for p in Path(file).parents if p.name == root)
    shutil.copytree(package, where / root, ignore=shutil.ignore_patterns("__pycache__"))
    (where / root / Path(file).relative_to(package)).write_bytes(mutated)
    sys.path.insert(0, str(where))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(where), os.environ.get("PYTHONPATH", "")) if p)


def apply_in_child(
    mutant: Mutant, file: str, module_name: str, roots: tuple[str, ...], repo: str, *, overlay: Path | None = None
) -> bool:
    source = Path(file).read_bytes()
    mutated = mutant.apply(source)
    if overlay is not None:
        _overlay(file, module_name, mutated, overlay)
    module = sys.modules.get(module_name)
    if module is None:
        return True  # never imported here: only the processes a test starts see the change
    if mutant.scope is not None:
        code = compile(mutated, file, "exec", dont_inherit=True)
        if _swap_code(module, code, mutant.scope):
            return True
    _rerun_modules(module_name, mutated, roots, repo)
    return True


# --- the loop ------------------------------------------------------------------------------------------
@dataclass
class Running:
    index: int
    pid: int
    started: float
    limit: float
    verdict_file: Path


def _holders(module_name: str, items: list[pytest.Item]) -> set[str]:
    """The tests whose module holds an object of `module_name` (a table it imported): a test that reads a
    module constant without calling the module's functions is not in the map, yet sees its mutant."""
    module = sys.modules.get(module_name)
    if module is None:
        return set()
    plain = (int, float, str, bytes, bool, type(None), types.ModuleType)  # shared by identity, not by import
    owned = {id(v) for v in vars(module).values() if not isinstance(v, plain)}
    out = set()
    for item in items:
        test_module = getattr(item, "module", None)
        if test_module is not None and any(id(v) in owned for v in vars(test_module).values()):
            out.add(item.nodeid)
    return out


def _select(
    mutant: Mutant, file: str, tests: dict[str, Any], items: list[pytest.Item], related: str, *, holders: set[str]
) -> list[pytest.Item]:
    by_id = {item.nodeid: item for item in items}
    usable = {nodeid: data for nodeid, data in tests.items() if data[0] and nodeid in by_id}
    if mutant.scope is not None:
        chosen = [n for n, d in usable.items() if [file, mutant.scope] in d[2]]
        chosen = sorted(chosen, key=lambda n: usable[n][1])
    else:
        touching = [n for n, d in usable.items() if any(f == file for f, _ in d[2])]
        readers = [n for n in usable if n not in touching and n in holders]
        others = [
            n
            for n, d in usable.items()
            if n not in touching and n not in readers and any(f.startswith(related) for f, _ in d[2])
        ]
        chosen = [*sorted(touching, key=lambda n: usable[n][1]), *sorted(readers, key=lambda n: usable[n][1])]
        chosen += sorted(others, key=lambda n: usable[n][1])
    # A test that starts a process may reach the change there, where the profiler cannot see: it runs last.
    children = sorted(
        (n for n, d in usable.items() if n not in chosen and [CHILD, CHILD] in d[2]), key=lambda n: usable[n][1]
    )
    return [by_id[n] for n in chosen + children]


@dataclass(frozen=True)
class Job:
    mutant: Mutant
    file: str
    selected: list[pytest.Item]
    verdict: Path
    cpu_limits: list[float]  # seconds of CPU each selected test may use before the mutant counts as timed out


def _child(job: Job, plan: Plan, roots: tuple[str, ...]) -> None:
    mutant, file, selected, verdict = job.mutant, job.file, job.selected, job.verdict
    status = ERROR
    overlay = Path(tempfile.mkdtemp(prefix="mutant-"))
    # Given back when a test fails: a mutant that filled its memory limit still holds that memory (the failed
    # test's traceback keeps its frames), and the verdict must still be written.
    reserve = [bytearray(16 * 2**20)]
    try:
        _silence()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGVTALRM, signal.SIG_DFL)
        _cap_memory(plan.memory_limit)
        apply_in_child(mutant, file, plan.modules[file], roots, str(Path.cwd()), overlay=overlay)
        status = SURVIVED
        for item, reports in _run_reports(selected, job.cpu_limits, verdict):
            if any(r.failed for r in reports):
                reserve.clear()
                status = OUT_OF_MEMORY if _out_of_memory(reports) else KILLED
                verdict.write_text(item.nodeid)
                break
    except BaseException as exc:  # an import-time failure of the mutated module also kills the mutant
        reserve.clear()
        status = OUT_OF_MEMORY if isinstance(exc, MemoryError) else KILLED
        # Raised in pytest's own code (a report made with no memory left) or while the mutant was applied.
        test = verdict.read_text() if verdict.exists() else ""
        verdict.write_text(
            test if status == OUT_OF_MEMORY and test else f"{test or '(applying the mutant)'} raised {exc!r}"
        )
    finally:
        shutil.rmtree(overlay, ignore_errors=True)
        os._exit(status)


def run_mutants(session: pytest.Session, plan: Plan) -> None:
    items = list(session.items)
    tests = coverage_map(plan, items)
    failing = sorted(n for n, d in tests.items() if not d[0])
    for nodeid in failing:
        _say(f"mutation: left out (fails without any mutant): {nodeid}")
    roots = tuple(sorted({name.split(".")[0] for name in plan.modules.values()}))
    files_by_path = {Path(f).relative_to(Path.cwd()).as_posix(): f for f in plan.modules}
    results: list[dict[str, Any]] = []
    pending = list(enumerate(plan.mutants))
    running: list[Running] = []
    holders: dict[str, set[str]] = {}
    tmp = Path(tempfile.mkdtemp(prefix="mutation-"))
    total = len(plan.mutants)
    while pending or running:
        while pending and len(running) < plan.jobs:
            index, mutant = pending.pop(0)
            file = files_by_path[mutant.path]
            related = next(d for d in plan.source_dirs if file.startswith(d.rstrip("/") + "/"))
            if file not in holders:
                holders[file] = _holders(plan.modules[file], items)
            selected = _select(mutant, file, tests, items, related, holders=holders[file])
            if not selected:
                results.append({**_record(mutant), "status": "no tests", "by": None, "tests": 0})
                continue
            budget = sum(tests[i.nodeid][1] for i in selected)
            verdict = tmp / f"{index}.txt"
            pid = os.fork()
            if pid == 0:
                # An endless loop shows in the first test that reaches it: each test gets 30 s of CPU and ten
                # times what it took in the map, so such a mutant ends there, not at the limit of all its tests.
                limits = [plan.cpu_seconds + 10 * tests[i.nodeid][1] for i in selected]
                _child(Job(mutant, file, selected, verdict, limits), plan, roots)
            running.append(Running(index, pid, time.monotonic(), 30 + 10 * budget, verdict))
            results.append({**_record(mutant), "status": "running", "by": None, "tests": len(selected)})
        time.sleep(0.01)
        for run in list(running):
            done, status = os.waitpid(run.pid, os.WNOHANG)
            timed_out = not done and time.monotonic() - run.started > run.limit
            if timed_out:
                os.kill(run.pid, signal.SIGKILL)
                os.waitpid(run.pid, 0)
            if not done and not timed_out:
                continue
            running.remove(run)
            entry = next(r for r in results if r["key"] == plan.mutants[run.index].key)
            code = os.waitstatus_to_exitcode(status) if done else None
            timed_out = timed_out or code == -signal.SIGVTALRM
            # Any other signal killed the test process under the mutant (the unmutated tests pass): a crash a
            # real run shows too, so the mutant is caught.
            crashed = not timed_out and code is not None and code < 0
            entry["status"] = (
                "timeout" if timed_out else "crashed" if crashed else STATUSES.get(code or 0, f"error {code}")
            )
            verdict_known = entry["status"] != "survived" and run.verdict_file.exists()
            entry["by"] = run.verdict_file.read_text() if verdict_known else None
            if crashed and code is not None:
                entry["by"] = f"{entry['by'] or '(applying the mutant)'}: died of {signal.Signals(-code).name}"
            finished = sum(r["status"] != "running" for r in results)
            plan.results.write_text(json.dumps({"results": results, "left_out": failing}, indent=1))
            if entry["status"] != "killed":
                _say(f"mutation: [{finished}/{total}] {entry['status']}: {plan.mutants[run.index].describe()}")
            elif finished % 50 == 0:
                _say(f"mutation: [{finished}/{total}] ...")
    plan.results.write_text(json.dumps({"results": results, "left_out": failing}, indent=1))


def _record(mutant: Mutant) -> dict[str, Any]:
    return {"key": mutant.key, "path": mutant.path, "line": mutant.line, "description": mutant.describe()}


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    option = session.config.getoption("--mutation-plan")
    if not option:
        return None
    _quiet_hypothesis()
    run_mutants(session, Plan.load(option))
    return True
