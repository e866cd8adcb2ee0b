"""Python stacks without ptrace: the hook every interpreter of the image runs at start, and its installer.

`install()` registers `faulthandler` on `SIGNAL` (a real-time signal nothing else in the image uses) to write
every thread's stack to `$GRPO_STACKS_DIR/stacks-<pid>.txt`, and re-opens that file under the child's own pid
after a fork. It does nothing unless `GRPO_STACKS_DIR` is set (the RayCluster's pods set it) and never raises: a
missing or unwritable directory leaves the interpreter as it was. faulthandler writes from the signal handler
itself, without the GIL, so a process blocked in C (a collective, a CUDA call) still answers; no ptrace, no
SYS_PTRACE. The image runs it through a `.pth` file in site-packages (`python -m grpo_launcher.stackdump
--install-pth`): Python's `site` executes it in every interpreter of that environment, Ray's workers and
SGLang's spawned children included (docs/integrations/python.md). `grpo_launcher.stacks` signals and collects.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import os
import signal
import sys
from pathlib import Path
from typing import IO

ENV = "GRPO_STACKS_DIR"
# SIGRTMIN is 34 under glibc (it keeps 32 and 33 for its threads); +7 is clear of the few libraries that take the
# first real-time signals for timers. Linux only: where there are none, `install` does nothing.
SIGNAL: int | None = int(signal.SIGRTMIN) + 7 if hasattr(signal, "SIGRTMIN") else None
PTH_NAME = "grpo-stackdump.pth"
# One line, as `site` wants it ("import" first). The env check comes before the import, so an interpreter outside
# a Ray pod imports nothing of ours; an import error is one line `site` prints, never a failed start.
PTH_LINE = (
    "import os; os.environ.get('GRPO_STACKS_DIR') and __import__('grpo_launcher.stackdump').stackdump.install()\n"
)

_file: IO[str] | None = None
_fork_hook = False


def dump_path(directory: str | Path, pid: int) -> Path:
    """Where process `pid` writes its stacks: one file per process, so two dumps never interleave."""
    return Path(directory) / f"stacks-{pid}.txt"


def install() -> bool:
    """Register this process's stack dump; True when it is registered. Never raises."""
    global _fork_hook  # noqa: PLW0603 - one fork hook per interpreter, however often install() runs
    try:
        if not _register():
            return False
        if not _fork_hook:
            os.register_at_fork(after_in_child=_after_fork)
            _fork_hook = True
        return True
    except Exception:  # a hook that breaks the interpreter's start is worse than no stacks
        return False


def _register() -> bool:
    global _file  # faulthandler keeps the file object; so do we, to close it once replaced (after a fork)
    directory = os.environ.get(ENV)
    if not directory or SIGNAL is None:
        return False
    try:
        Path(directory).mkdir(parents=True, exist_ok=True)
        opened = dump_path(directory, os.getpid()).open("a", encoding="utf-8")
    except OSError:
        return False
    faulthandler.register(SIGNAL, file=opened, all_threads=True, chain=False)
    previous, _file = _file, opened
    if previous is not None:
        previous.close()
    return True


def _after_fork() -> None:
    """A forked child writes to its own pid's file: the parent's file would mix both processes' stacks."""
    with contextlib.suppress(Exception):  # the child keeps the parent's registration rather than fail
        _register()


def install_pth(target: Path | None = None) -> Path:
    """Write the `.pth` into `target` (default: the site-packages this package is installed in, where `site` reads
    it) and return its path."""
    where = target or Path(__file__).resolve().parent.parent
    path = where / PTH_NAME
    path.write_text(PTH_LINE, encoding="utf-8")
    return path


def registered(pid: int) -> bool:
    """Whether `pid` catches `SIGNAL` (/proc/<pid>/status SigCgt), i.e. its hook is installed."""
    if SIGNAL is None:
        return False
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (SIGNAL - 1) & 1)
    except (OSError, ValueError, IndexError):
        return False
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grpo_launcher.stackdump", description=__doc__.splitlines()[0])
    parser.add_argument("--install-pth", action="store_true", help=f"write {PTH_NAME} into site-packages")
    parser.add_argument("--check", action="store_true", help=f"exit 1 unless this interpreter registered ({ENV})")
    args = parser.parse_args(argv)
    if args.install_pth:
        print(install_pth())
    if args.check and not registered(os.getpid()):
        print(f"stackdump: this interpreter did not register signal {SIGNAL} ({ENV}={os.environ.get(ENV)!r})")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
