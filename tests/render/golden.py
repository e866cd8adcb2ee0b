"""Golden files of `grpo render` for every valid example (`make golden` regenerates them)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml
from grpo_operator.cli.loading import parse_run
from grpo_operator.planning.plan import make_plan
from grpo_operator.render import render
from grpo_operator.render.yamlout import dump_all

from tests.support.builders import SETTINGS, valid_examples

GOLDEN = Path(__file__).parent / "golden"


def rendered(path: Path) -> dict[str, str]:
    run, _ = parse_run(yaml.safe_load(path.read_text()))
    assert run is not None
    result = render(run, make_plan(run), SETTINGS)
    return {
        f"{path.stem}.yaml": dump_all(result.children),
        f"{path.stem}.job.json": json.dumps(result.job.as_dict(), indent=2) + "\n",
    }


def main() -> int:
    GOLDEN.mkdir(exist_ok=True)
    for old in GOLDEN.iterdir():
        old.unlink()
    for path in valid_examples():
        for name, text in rendered(path).items():
            (GOLDEN / name).write_text(text)
            print(f"wrote {GOLDEN.relative_to(Path.cwd()) / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
