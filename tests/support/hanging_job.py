"""A Ray job that hangs in known places, for the evidence capture: an actor blocked in `wait_in_named_frame`
(as a rank waits in a collective) and a driver blocked in `driver_waits_here`. It prints a marker line, then
`--spam-mib` MiB of output (a job that floods its log), then hangs until stopped. With `--actor-resource NAME`
the actor asks for one of the custom resource NAME, so it runs on the node that advertises it. With `--spawn`
the actor also starts a Python subprocess, as SGLang's engine starts its scheduler, blocked in
`subprocess_waits_here` (it exits when the actor's process is gone).

    python tests/support/hanging_job.py --marker TEXT [--spam-mib N] [--actor-resource NAME] [--spawn]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import ray

SUBPROCESS = """
import os, time
parent = os.getppid()
def subprocess_waits_here():
    while os.getppid() == parent:
        time.sleep(0.5)
print("spawned", flush=True)
subprocess_waits_here()
"""


@ray.remote(num_cpus=0)
class Hanger:
    def spawn(self) -> int:
        self.child = subprocess.Popen([sys.executable, "-c", SUBPROCESS], stdout=subprocess.PIPE, text=True)
        assert self.child.stdout is not None and self.child.stdout.readline().strip() == "spawned"
        return self.child.pid

    def wait_in_named_frame(self) -> None:
        while True:
            time.sleep(0.5)

    def ready(self) -> bool:
        return True


def driver_waits_here() -> None:
    while True:
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--marker", required=True)
    parser.add_argument("--spam-mib", type=int, default=0)
    parser.add_argument("--actor-resource", default=None)
    parser.add_argument("--spawn", action="store_true")
    args = parser.parse_args()
    ray.init()
    resources = {args.actor_resource: 1} if args.actor_resource else {}
    hanger = Hanger.options(resources=resources).remote()  # type: ignore[attr-defined]
    ray.get(hanger.ready.remote())
    if args.spawn:
        print(f"subprocess pid {ray.get(hanger.spawn.remote())}", flush=True)
    hanger.wait_in_named_frame.remote()
    line = "x" * 1023 + "\n"
    for _ in range(args.spam_mib * 1024):
        sys.stdout.write(line)
    print(args.marker, flush=True)
    driver_waits_here()


if __name__ == "__main__":
    main()
