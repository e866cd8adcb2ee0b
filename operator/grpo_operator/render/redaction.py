"""What a kept log may not hold: the run's secrets, replaced by `REDACTED` before the log tail (render/joblogs.py)
or an evidence bundle (render/evidence.py) is written. Pure: the caller passes the values it knows (the run's Ray
auth token, and the values of the Secrets its `secretEnv` and `hfTokenSecret` name, read when the log is kept),
and `run_secrets` adds what the spec itself holds (a value extraArgs gives a flag that takes a credential, from a
run made before such flags were refused). Anything shaped like a Hugging Face token goes too, whoever printed it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from grpo_operator.api import GRPORun
from grpo_operator.planning.flags import credential_values

REDACTED = "<redacted>"
# A shorter value would blank out ordinary text (every "ab" of the log) and keeps nothing secret anyway.
MIN_SECRET_CHARS = 4
_HF_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{20,}")


def _forms(secrets: Iterable[str]) -> list[str]:
    """Each secret as it may be printed, longest first (so a secret inside another goes with it): as stored and
    without surrounding whitespace (a Secret made from a file often ends in a newline no program prints)."""
    found = {form for s in secrets for form in (s, s.strip()) if len(form.strip()) >= MIN_SECRET_CHARS}
    return sorted(found, key=lambda s: (-len(s), s))


def redact(text: str, secrets: Sequence[str]) -> str:
    for secret in _forms(secrets):
        text = text.replace(secret, REDACTED)
    return _HF_TOKEN.sub(REDACTED, text)


def run_secrets(run: GRPORun, known: Iterable[str | None]) -> list[str]:
    """The values a kept log of `run` is redacted of: `known` (read by the caller) and those in its spec."""
    return [s for s in known if s] + credential_values(run.spec.extra_args)
