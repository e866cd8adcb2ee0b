"""The remote reward client miles calls through `--custom-rm-path grpo_launcher.reward_client.reward`.

Why not miles's own `remote_rm`: it opens an aiohttp session per sample with the 300 s default timeout, has no
retry, ignores `Retry-After`, and raises on any non-2xx; the default rollout path re-raises, so one honest 503
of the reward service (queue full, a worker being replaced) ends the whole Ray job.

How miles calls it: `--custom-rm-path` names a function by module path; miles awaits it as
`await fn(args, sample)` for one finished sample (the default) and as `await fn(args, samples)` for a list
(`--group-rm`, or multi-sample generation), so `reward` takes either and returns a float or a list of floats
(docs/integrations/miles.md: the reward hook). A sample has `.prompt`, `.response`, `.label`.

What it does:
- one aiohttp session per event loop, shared by every call (pooled keep-alive connections);
- a per-request (read) timeout from the service's deadline (`GRPO_REWARD_DEADLINE_S`, the REWARD_DEADLINE_S the
  operator gives the service): twice the deadline plus 5 s, so queueing behind one slow item is no timeout;
- lists go to `POST /score/batch` (the service's batch route; one request per group); a 413 (batch larger than
  the service's queue) splits the batch in halves;
- retries, with exponential backoff and jitter (0.5 s doubling to 30 s), of 503 (waiting `Retry-After` when
  given), 429, 502, 504, timeouts and connection errors (a restarting service), for at most
  `GRPO_REWARD_RETRY_BUDGET_S` seconds (default 600) per request;
- 422 (a label the service cannot read): the sample scores 0.0, as an unverifiable answer earns no credit,
  is counted (`STATS.unscorable`) and logged with the service's message; one such label never ends the run.
  A 422 for a batch item re-scores that batch one item at a time so only the bad items score 0.0;
- when the budget is spent, or on another 4xx (a client bug: retrying cannot help), it writes
  `{"reason": "RewardServiceFailed", "message": "<one line>"}` to `$GRPO_FAILURE_FILE` (when set; the
  launcher's contract, `grpo_launcher/summary.py`), prints the same object on stdout after `GRPO_FAILURE `
  (for when that variable does not reach the actor miles runs this in), and raises `RewardServiceFailed`,
  which ends the job.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import logging
import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

log = logging.getLogger("grpo_launcher.reward_client")

FAILURE_FILE_ENV = "GRPO_FAILURE_FILE"
FAILURE_LINE_MARK = "GRPO_FAILURE"
DEADLINE_ENV = "GRPO_REWARD_DEADLINE_S"
BUDGET_ENV = "GRPO_REWARD_RETRY_BUDGET_S"
DEFAULT_DEADLINE_S = 30.0
DEFAULT_BUDGET_S = 600.0
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0
RETRIED_STATUS = {429, 502, 503, 504}
UNSCORABLE_REWARD = 0.0


class RewardServiceFailed(RuntimeError):
    """The reward service could not score within the retry budget (or refused a request for good)."""


@dataclass
class Stats:
    """What the client saw in this process (tests read it; each 422 is also logged)."""

    requests: int = 0
    retries: int = 0
    unscorable: int = 0


STATS = Stats()


@dataclass(frozen=True)
class Policy:
    timeout_s: float
    budget_s: float

    @classmethod
    def from_env(cls, environ: dict[str, str] | os._Environ[str] = os.environ) -> Policy:
        deadline = _positive(environ, DEADLINE_ENV, DEFAULT_DEADLINE_S)
        return cls(timeout_s=2 * deadline + 5, budget_s=_positive(environ, BUDGET_ENV, DEFAULT_BUDGET_S))


def _positive(environ: dict[str, str] | os._Environ[str], name: str, default: float) -> float:
    raw = environ.get(name, "")
    try:
        value = float(raw) if raw else default
    except ValueError:
        raise _fail(f"{name}={raw!r} is not a number of seconds") from None
    if value <= 0:
        raise _fail(f"{name}={raw!r} must be greater than 0")
    return value


_sessions: dict[asyncio.AbstractEventLoop, aiohttp.ClientSession] = {}


def session() -> aiohttp.ClientSession:
    """The shared session of the running event loop (miles runs its rollout in one loop)."""
    loop = asyncio.get_running_loop()
    current = _sessions.get(loop)
    if current is None or current.closed:
        for old in [lp for lp in _sessions if lp.is_closed()]:
            del _sessions[old]
        current = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256))
        _sessions[loop] = current
    return current


async def close() -> None:
    """Close this loop's session (tests; miles's process simply exits)."""
    current = _sessions.pop(asyncio.get_running_loop(), None)
    if current is not None:
        await current.close()


def _retry_after_s(value: str | None) -> float | None:
    if not value:
        return None
    with contextlib.suppress(ValueError):
        return max(0.0, float(value))
    with contextlib.suppress(TypeError, ValueError):
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time())
    return None


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _fail(message: str) -> RewardServiceFailed:
    message = _one_line(message)
    failure = json.dumps({"reason": "RewardServiceFailed", "message": message})
    path = os.environ.get(FAILURE_FILE_ENV)
    if path:
        try:
            Path(path).write_text(failure)
        except OSError as exc:
            log.error("could not write %s=%s: %s", FAILURE_FILE_ENV, path, exc)
    # miles calls this client in its RolloutManager actor, which gets the job's runtime env but not the env the
    # launcher gives miles's driver, and may run on another node: the
    # same record also goes to stdout, which Ray forwards to the driver's output the launcher reads.
    print(f"{FAILURE_LINE_MARK} {failure}", flush=True)
    log.error("reward service failed: %s", message)
    return RewardServiceFailed(message)


class _Unscorable(Exception):
    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class _TooLarge(Exception):
    pass


async def _post(url: str, body: Any, policy: Policy) -> Any:
    """POST with retries until a 2xx (its JSON), a 422 (`_Unscorable`), 413 (`_TooLarge`), or failure."""
    started = time.monotonic()
    attempt = 0
    # The service answers nothing until the reward is ready, so a read timeout bounds the wait for the answer;
    # no total, so waiting for a free pooled connection (miles sends hundreds of samples at once) is no timeout.
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=min(10.0, policy.timeout_s), sock_read=policy.timeout_s)
    while True:
        attempt += 1
        STATS.requests += 1
        wait_hint: float | None = None
        try:
            async with session().post(url, json=body, timeout=timeout) as resp:
                if 200 <= resp.status < 300:
                    return await resp.json()
                text = await resp.text()
                if resp.status == 422:
                    raise _Unscorable(_detail(text))
                if resp.status == 413:
                    raise _TooLarge(_detail(text))
                if resp.status not in RETRIED_STATUS:
                    raise _fail(f"{url} answered {resp.status}: {_detail(text)} (not retried: fix the request)")
                wait_hint = _retry_after_s(resp.headers.get("Retry-After"))
                why = f"{resp.status}: {_detail(text)}"
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError) as exc:
            why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if isinstance(exc, TimeoutError):
                why = f"no answer within {policy.timeout_s:g} s"
        elapsed = time.monotonic() - started
        backoff = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)  # noqa: S311 (jitter, not secrecy)
        delay = wait_hint if wait_hint is not None else backoff
        if elapsed + delay > policy.budget_s:
            raise _fail(
                f"{url}: no reward after {attempt} attempts in {elapsed:.0f} s "
                f"({BUDGET_ENV}={policy.budget_s:g}); last: {why}"
            )
        STATS.retries += 1
        log.warning("reward service %s; retry %d in %.1f s", _one_line(why, 200), attempt, delay)
        await asyncio.sleep(delay)


def _detail(text: str) -> str:
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        return _one_line(str(json.loads(text)["detail"]), 200)
    return _one_line(text, 200)


def _payload(sample: Any) -> dict[str, Any]:
    return {"prompt": sample.prompt, "response": sample.response, "label": sample.label}


def _unscorable(detail: str) -> float:
    STATS.unscorable += 1
    log.warning(
        "reward service cannot score a label (%s); it scores %s (%d so far)",
        detail,
        UNSCORABLE_REWARD,
        STATS.unscorable,
    )
    return UNSCORABLE_REWARD


async def _score_one(url: str, sample: Any, policy: Policy) -> float:
    try:
        return float(await _post(url, _payload(sample), policy))
    except _Unscorable as exc:
        return _unscorable(exc.detail)
    except _TooLarge as exc:
        raise _fail(f"{url} refused one sample as too large: {exc}") from None


async def _score_batch(url: str, samples: Sequence[Any], policy: Policy) -> list[float]:
    if not samples:
        return []
    try:
        rewards = await _post(url.rstrip("/") + "/batch", [_payload(s) for s in samples], policy)
        return [float(r) for r in rewards]
    except _Unscorable:
        # One unreadable label fails the whole batch (reward_service app.py _labels): isolate it.
        return list(await asyncio.gather(*(_score_one(url, s, policy) for s in samples)))
    except _TooLarge:
        if len(samples) == 1:
            return [await _score_one(url, samples[0], policy)]
        half = len(samples) // 2
        return [*await _score_batch(url, samples[:half], policy), *await _score_batch(url, samples[half:], policy)]


async def reward(args: Any, sample: Any, **_: Any) -> float | list[float]:
    """miles's `--custom-rm-path` entry point: one sample -> its reward; a list -> their rewards in order."""
    url = getattr(args, "rm_url", None)
    if not url:
        raise _fail("--rm-url is not set: the reward client needs the reward service's /score URL")
    policy = Policy.from_env()
    if isinstance(sample, list):
        return await _score_batch(url, sample, policy)
    return await _score_one(url, sample, policy)
