"""``python -m grpo_launcher``: see ``grpo_launcher.cli``."""

from __future__ import annotations

from grpo_launcher.cli import main

raise SystemExit(main())
