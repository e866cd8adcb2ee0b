"""Golden files of `grpo render` for every valid example (`make golden` regenerates them)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml
from grpo_operator.cli.loading import parse_run
from grpo_operator.planning.plan import make_plan
from grpo_operator.planning.validation import errors, validate
from grpo_operator.render import RenderSettings, render
from grpo_operator.render.yamlout import dump_all

GOLDEN = Path(__file__).parent / "golden"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SETTINGS = RenderSettings(reward_image="registry.example/grpo-reward@sha256:" + "0" * 64)


def valid_examples() -> list[Path]:
    out = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        run, problems = parse_run(yaml.safe_load(path.read_text()))
        if run is not None and not problems and not errors(validate(run)):
            out.append(path)
    return out


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
