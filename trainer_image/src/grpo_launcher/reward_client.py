"""The remote reward client miles calls through `--custom-rm-path grpo_launcher.reward_client.reward`.

Why not miles's own `remote_rm`: it opens a session per sample, has no retry, ignores `Retry-After` and raises
on any non-2xx, so one honest 503 of the reward service (queue full, a worker being replaced) ends the whole
Ray job. miles awaits `reward(args, sample)` for one sample and `reward(args, samples)` for a group, so it
takes either and returns a float or a list of floats, one per sample; a sample has `.prompt`, `.response`,
`.label`. The facts and their lines at the pinned commit: docs/integrations/miles.md, "Reward client".

What it does:
- one aiohttp session per event loop, shared by every call (pooled keep-alive connections);
- every attempt bounded in total time: the wait for the answer's headers by the service's deadline
  (`GRPO_REWARD_DEADLINE_S`, the REWARD_DEADLINE_S the operator gives the service: twice it plus 5 s, so
  queueing behind one slow item is no timeout), the body by the same total however slowly it drips, and the
  whole attempt, connection wait included, by what is left of the budget;
- every request carries an `X-Request-Id` that its retries repeat: the service attaches a retry to the work
  it already does for that id, so a timed-out attempt is never scored twice;
- lists go to `POST /score/batch` (the service's batch route; one request per group); a 413 (batch larger than
  the service's queue) splits the batch in halves, and a single sample refused so fails;
- retries, with exponential backoff and jitter (0.5 s doubling to 30 s), of 503, 429, 502, 504, timeouts and
  connection errors (a restarting service), for at most `GRPO_REWARD_RETRY_BUDGET_S` seconds (default 600)
  per request; the wait is the larger of the backoff and a finite `Retry-After`, never past the budget;
- an answer is accepted only as JSON of finite numbers within +-1e6 (`MAX_ABS_REWARD`: not booleans, strings,
  NaN, Infinity or 3.5e38, which miles's float32 makes infinite), a batch's as
  a list of exactly one per sample; an answer body is read to at most 1 MiB, decompressed to at most 1 MiB;
- 422 (a label the service cannot read): the sample scores 0.0, as an unverifiable answer earns no credit,
  is counted (`STATS.unscorable`) and logged with the service's message; one such label never ends the run.
  A 422 for a batch item re-scores that batch one item at a time so only the bad items score 0.0;
- every other outcome (the budget spent, another status, an answer that is not what the service sends)
  writes `{"reason": "RewardServiceFailed", "message": "<one line>"}` to `$GRPO_FAILURE_FILE` (when set; the
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
import math
import os
import random
import time
import uuid
import zlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

log = logging.getLogger("grpo_launcher.reward_client")

FAILURE_FILE_ENV = "GRPO_FAILURE_FILE"
FAILURE_LINE_MARK = "GRPO_FAILURE"
DEADLINE_ENV = "GRPO_REWARD_DEADLINE_S"
BUDGET_ENV = "GRPO_REWARD_RETRY_BUDGET_S"
REQUEST_ID_HEADER = "X-Request-Id"
DEFAULT_DEADLINE_S = 30.0
DEFAULT_BUDGET_S = 600.0
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0
RETRIED_STATUS = {429, 502, 503, 504}
UNSCORABLE_REWARD = 0.0
MAX_ANSWER_BYTES = 1024 * 1024  # the service's answer to a batch of 100,000 is about 0.5 MiB
_READ_CHUNK = 64 * 1024

# Indirections the tests replace with a fake clock (the budget and every wait are measured through them).
_monotonic: Callable[[], float] = time.monotonic
_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep


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
    if not math.isfinite(value) or value <= 0:
        raise _fail(f"{name}={raw!r} must be a finite number greater than 0")
    return value


_sessions: dict[asyncio.AbstractEventLoop, aiohttp.ClientSession] = {}


def session() -> aiohttp.ClientSession:
    """The shared session of the running event loop (miles runs its rollout in one loop)."""
    loop = asyncio.get_running_loop()
    current = _sessions.get(loop)
    if current is None or current.closed:
        for old in [lp for lp in _sessions if lp.is_closed()]:
            del _sessions[old]
        # auto_decompress off: `_read_body` decompresses itself, bounded (a gzip bomb is no answer).
        current = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256), auto_decompress=False)
        _sessions[loop] = current
    return current


async def close() -> None:
    """Close this loop's session (tests; miles's process simply exits)."""
    current = _sessions.pop(asyncio.get_running_loop(), None)
    if current is not None:
        await current.close()


def _retry_after_s(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header: delay-seconds or an HTTP date; None when unusable."""
    if not value:
        return None
    with contextlib.suppress(ValueError, OverflowError):
        seconds = float(value)
        return max(0.0, seconds) if math.isfinite(seconds) else None
    with contextlib.suppress(TypeError, ValueError, OverflowError, IndexError):
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time())
    return None


def _backoff_s(attempt: int) -> float:
    """The jittered exponential backoff after `attempt` (1-based); the exponent stops growing at the cap."""
    exponent = min(attempt - 1, math.ceil(math.log2(BACKOFF_MAX_S / BACKOFF_FIRST_S)))
    return min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2.0**exponent) * random.uniform(0.5, 1.0)  # noqa: S311 (jitter)


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
    # launcher gives miles's driver, and may run on another node (docs/integrations/miles.md "Reward client"):
    # the same record also goes to stdout, which Ray forwards to the driver's output the launcher reads.
    print(f"{FAILURE_LINE_MARK} {failure}", flush=True)
    log.error("reward service failed: %s", message)
    return RewardServiceFailed(message)


class _Unscorable(Exception):
    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class _TooLarge(Exception):
    pass


class _BadAnswer(Exception):
    """An answer that is not what the service sends (not JSON, too large, not finite numbers)."""


async def _read_body(resp: aiohttp.ClientResponse, limit: int = MAX_ANSWER_BYTES) -> bytes:
    """The body, decompressed, refused past `limit` bytes either side of decompression."""
    try:
        return await _read_bounded(resp, limit)
    except zlib.error as exc:
        raise _BadAnswer(f"the answer is not the compressed body it says it is ({exc})") from None


async def _read_bounded(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    encoding = resp.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("identity", "", "gzip", "x-gzip", "deflate"):
        raise _BadAnswer(f"the answer has Content-Encoding {encoding[:40]!r}, which the client does not accept")
    inflate = zlib.decompressobj(wbits=47) if encoding in ("gzip", "x-gzip", "deflate") else None
    raw = 0
    out = bytearray()
    async for chunk in resp.content.iter_chunked(_READ_CHUNK):
        raw += len(chunk)
        if raw > limit:
            raise _BadAnswer(f"the answer is larger than {limit} bytes")
        if inflate is None:
            out += chunk
        else:
            out += inflate.decompress(chunk, limit + 1 - len(out))
            if inflate.unconsumed_tail:
                raise _BadAnswer(f"the answer decompresses to more than {limit} bytes")
        if len(out) > limit:
            raise _BadAnswer(f"the answer is larger than {limit} bytes")
    if inflate is not None:
        out += inflate.flush(limit + 1 - len(out))
        if len(out) > limit or not inflate.eof:
            raise _BadAnswer("the answer is not a complete compressed body within the limit")
    return bytes(out)


# miles keeps rewards as float32 (max 3.4e38): 1e300 or 3.5e38 become infinity there, then NaN advantages. The
# bound sits far below that so a group's sums and squares (its mean and standard deviation) stay finite too, and
# far above any reward a scorer means (rule rewards are 0..1; a reward model's logits are tens).
MAX_ABS_REWARD = 1e6


def _not_a_number(token: str) -> Any:
    raise ValueError(f"{token} is not a reward")


def _decode(body: bytes) -> Any:
    try:
        return json.loads(body.decode("utf-8"), parse_constant=_not_a_number)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _BadAnswer(f"the answer is not JSON: {_one_line(body[:120].decode('utf-8', 'replace'), 120)!r}") from None


def _as_reward(value: Any) -> float:
    """A finite JSON number (bool is an int in Python, but `true` is no reward)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _BadAnswer(f"the answer {_one_line(repr(value), 80)} is not a number")
    try:
        reward = float(value)
    except OverflowError:
        reward = math.inf
    if not math.isfinite(reward):
        raise _BadAnswer(f"the answer {_one_line(repr(value), 80)} is not a finite number")
    if abs(reward) > MAX_ABS_REWARD:
        raise _BadAnswer(
            f"the answer {_one_line(repr(value), 80)} is outside the reward range [-{MAX_ABS_REWARD:g}, "
            f"{MAX_ABS_REWARD:g}] (miles keeps rewards as float32)"
        )
    return reward


def _as_rewards(value: Any, count: int) -> list[float]:
    if not isinstance(value, list):
        raise _BadAnswer(f"the answer to a batch of {count} is a {type(value).__name__}, not a list")
    if len(value) != count:
        raise _BadAnswer(f"the answer to a batch of {count} has {len(value)} rewards")
    return [_as_reward(item) for item in value]


async def _attempt(url: str, body: Any, headers: dict[str, str], policy: Policy, left_s: float) -> tuple[int, Any]:
    """One exchange: (status, JSON answer) for a 2xx, (status, detail text) otherwise; bounded by `left_s`."""
    timeout = aiohttp.ClientTimeout(
        total=None, sock_connect=min(10.0, policy.timeout_s), sock_read=policy.timeout_s, connect=left_s
    )
    async with asyncio.timeout(left_s):
        async with session().post(url, json=body, headers=headers, timeout=timeout, allow_redirects=False) as resp:
            async with asyncio.timeout(policy.timeout_s):  # the body in total, however slowly it drips
                if 200 <= resp.status < 300:
                    return resp.status, _decode(await _read_body(resp))
                with contextlib.suppress(_BadAnswer):
                    return resp.status, (_detail(await _read_body(resp, 64 * 1024)), resp.headers.get("Retry-After"))
                return resp.status, ("(an unreadable body)", resp.headers.get("Retry-After"))


async def _post(url: str, body: Any, policy: Policy) -> Any:
    """POST with retries until a 2xx (its JSON), a 422 (`_Unscorable`), 413 (`_TooLarge`), or failure."""
    started = _monotonic()
    headers = {REQUEST_ID_HEADER: uuid.uuid4().hex, "Accept-Encoding": "identity"}
    attempt = 0
    while True:
        attempt += 1
        STATS.requests += 1
        wait_hint: float | None = None
        left = policy.budget_s - (_monotonic() - started)
        try:
            status, answer = await _attempt(url, body, headers, policy, max(left, 0.001))
            if 200 <= status < 300:
                return answer
            detail, retry_after = answer
            if status == 422:
                raise _Unscorable(detail)
            if status == 413:
                raise _TooLarge(detail)
            if status not in RETRIED_STATUS:
                raise _fail(f"{url} answered {status}: {detail} (not retried: fix the request)")
            wait_hint = _retry_after_s(retry_after)
            why = f"{status}: {detail}"
        except _BadAnswer as exc:
            raise _fail(f"{url} answered something that is not a reward: {exc}") from None
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError) as exc:
            why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if isinstance(exc, TimeoutError):
                why = f"no whole answer within {min(policy.timeout_s, left):g} s"
        except aiohttp.ClientError as exc:  # a malformed answer, a redirect loop: retrying cannot help
            raise _fail(f"{url}: {type(exc).__name__}: {exc}") from None
        elapsed = _monotonic() - started
        delay = max(_backoff_s(attempt), wait_hint or 0.0)
        if elapsed + delay >= policy.budget_s:
            raise _fail(
                f"{url}: no reward after {attempt} attempts in {elapsed:.0f} s "
                f"({BUDGET_ENV}={policy.budget_s:g}); last: {why}"
            )
        STATS.retries += 1
        log.warning("reward service %s; retry %d in %.1f s", _one_line(why, 200), attempt, delay)
        await _sleep(delay)


def _detail(body: bytes) -> str:
    text = body.decode("utf-8", "replace")
    with contextlib.suppress(ValueError, TypeError, KeyError, RecursionError):
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
        answer = await _post(url, _payload(sample), policy)
    except _Unscorable as exc:
        return _unscorable(exc.detail)
    except _TooLarge as exc:
        raise _fail(f"{url} refused one sample as too large: {exc}") from None
    try:
        return _as_reward(answer)
    except _BadAnswer as exc:
        raise _fail(f"{url} answered something that is not a reward: {exc}") from None


async def _score_batch(url: str, samples: Sequence[Any], policy: Policy) -> list[float]:
    if not samples:
        return []
    try:
        answer = await _post(url.rstrip("/") + "/batch", [_payload(s) for s in samples], policy)
    except _Unscorable:
        # One unreadable label fails the whole batch (reward_service app.py _labels): isolate it.
        return list(await asyncio.gather(*(_score_one(url, s, policy) for s in samples)))
    except _TooLarge:
        if len(samples) == 1:
            return [await _score_one(url, samples[0], policy)]
        half = len(samples) // 2
        return [*await _score_batch(url, samples[:half], policy), *await _score_batch(url, samples[half:], policy)]
    try:
        return _as_rewards(answer, len(samples))
    except _BadAnswer as exc:
        raise _fail(f"{url}/batch answered something that is not a list of rewards: {exc}") from None


async def reward(args: Any, sample: Any, **_: Any) -> float | list[float]:
    """miles's `--custom-rm-path` entry point: one sample -> its reward; a list -> their rewards in order."""
    url = getattr(args, "rm_url", None)
    if not url:
        raise _fail("--rm-url is not set: the reward client needs the reward service's /score URL")
    policy = Policy.from_env()
    try:
        if isinstance(sample, list):
            return await _score_batch(url, sample, policy)
        return await _score_one(url, sample, policy)
    except RewardServiceFailed:
        raise
    except (aiohttp.ClientError, ValueError, TypeError, OSError) as exc:  # e.g. an --rm-url aiohttp cannot use
        raise _fail(f"{url}: {type(exc).__name__}: {exc}") from None
