"""The HTTP surface: a FastAPI app speaking miles's remote_rm contract, plus probes and metrics.

Routes: `POST /score` (one `{prompt, response, label}` in, a bare JSON number out), `POST /score/batch`
(a list in, a list of numbers out), `GET /healthz` (liveness: answered by the event loop alone),
`GET /ready` (readiness: a live worker and a service-error ratio under the threshold), `GET /metrics`
(Prometheus text format) and `GET /` (the effective settings). The handlers only admit, normalise and
classify; scoring happens in `pool.ScoringPool`. A request may carry an `X-Request-Id`: a retry with the same id
and the same body (its items' prompts, responses and labels, hashed) attaches to the work already running or
answered for it instead of scoring it again, so a client that gave up waiting never multiplies the work by
retrying; the same id with another body is scored anew, as its own work. Status codes: 200 with the reward; 422 for a body or a
gold label that cannot be used (the message names the field, the value and the fix); 413 for a batch
larger than the queue or a body over REWARD_MAX_BODY_BYTES (`bodylimit`, refused before it is read); 503 with Retry-After when the queue is full or the service failed. A failure of
the service is never turned into a reward.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    StrictFloat,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
)
from starlette.exceptions import HTTPException as StarletteHTTPException

from reward_service import worker
from reward_service.bodylimit import BodyLimit, BodyTooLarge
from reward_service.extraction import LabelError, label_text
from reward_service.health import HealthWindow, Outcome
from reward_service.metrics import ServiceMetrics
from reward_service.pool import PoolError, ScoringPool
from reward_service.settings import Backend, RewardSettings, TimeoutPolicy

log = logging.getLogger("reward_service")

MAX_REQUEST_ID_CHARS = 128  # a longer X-Request-Id is not used (each such request is scored on its own)
INLINE_ON_LOOP_CHARS = 16_384  # one item of the default REWARD_INLINE_MAX_CHARS; more is judged in a thread

_STATUS_TO_OUTCOME = {
    worker.SCORED: Outcome.SCORED,
    worker.NO_ANSWER: Outcome.NO_ANSWER,
    worker.TIMEOUT: Outcome.TIMEOUT,
    worker.BAD_LABEL: Outcome.BAD_LABEL,
}


class ScoreRequest(BaseModel):
    """One sample, as miles's remote_rm posts it."""

    model_config = ConfigDict(extra="ignore")

    prompt: JsonValue = Field(
        default=None, description="The prompt (a string or chat messages); used by the reward_model backend only"
    )
    response: StrictStr = Field(description="The generated text to score")
    label: StrictStr | StrictInt | StrictFloat | None = Field(
        default=None, description="The gold answer; required by the math_verify backend"
    )


class ErrorBody(BaseModel):
    detail: str
    outcome: str


class Rejected(Exception):
    """A request that ends without rewards: the HTTP status, the message, and what it counts as."""

    def __init__(self, status: int, detail: str, outcome: Outcome, retry_after_s: int | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.outcome = outcome
        self.retry_after_s = retry_after_s

    def response(self) -> JSONResponse:
        headers = {"Retry-After": str(self.retry_after_s)} if self.retry_after_s is not None else None
        return JSONResponse({"detail": self.detail, "outcome": self.outcome.value}, self.status, headers)


def _digest(text: str) -> str:
    return f"{len(text)} chars, sha1 {hashlib.sha1(text.encode('utf-8', 'replace')).hexdigest()[:12]}"  # noqa: S324


def _items_digest(items: Sequence[ScoreRequest]) -> str:
    """A hash of everything that decides the items' rewards: each prompt, response and label, length-prefixed."""
    digest = hashlib.sha256()
    for item in items:
        for part in (item.response, json.dumps([item.prompt, item.label], sort_keys=True)):
            data = part.encode("utf-8", "surrogatepass")
            digest.update(len(data).to_bytes(8, "big"))
            digest.update(data)
    return digest.hexdigest()


class RewardService:
    """Admission, scoring and outcome accounting, shared by the routes of one app."""

    def __init__(self, settings: RewardSettings) -> None:
        self.settings = settings
        self.pool = ScoringPool(
            worker.WorkerConfig(
                backend=settings.backend,
                extraction=settings.extraction,
                budget_s=settings.worker_budget_s,
                cache_bytes=settings.cache_mib * 1024 * 1024,
                model_name=settings.model_name,
                max_length=settings.max_length,
                torch_threads=settings.torch_threads,
            ),
            workers=settings.workers,
            deadline_s=settings.hard_deadline_s,
        )
        self.health = HealthWindow(settings.ready_window_s, settings.ready_min_requests, settings.ready_max_error_ratio)
        self.metrics = ServiceMetrics(self.live_values)
        self.in_flight = 0
        self._running: dict[str, asyncio.Future[list[float]]] = {}
        self._answered: OrderedDict[str, list[float]] = OrderedDict()
        self._answered_items = 0

    def live_values(self) -> dict[str, float]:
        return {
            "pool_workers": self.pool.alive_workers(),
            "pool_workers_desired": self.settings.workers,
            "queue_depth": self.in_flight,
            "worker_restarts": self.pool.restarts,
            "pool_rebuilds": self.pool.rebuilds,
            "ready": 0.0 if self.not_ready_reason() else 1.0,
            "service_error_ratio": self.health.error_ratio(),
        }

    def not_ready_reason(self) -> str | None:
        if self.pool.alive_workers() == 0:
            return "no scoring worker is alive"
        if self.health.failing():
            items, errors = self.health.counts()
            return (
                f"scoring is failing: {errors} service errors in the last {items} items "
                f"(over REWARD_READY_MAX_ERROR_RATIO={self.settings.ready_max_error_ratio:g})"
            )
        return None

    def _account(self, outcome: Outcome, items: int = 1) -> None:
        self.metrics.count(outcome, items)
        for _ in range(items):
            self.health.record(outcome)

    def _labels(self, items: Sequence[ScoreRequest], batch: bool) -> list[str | None]:
        if self.settings.backend is not Backend.MATH_VERIFY:
            return [None] * len(items)
        labels: list[str | None] = []
        for index, item in enumerate(items):
            try:
                labels.append(label_text(item.label))
            except LabelError as error:
                self._account(Outcome.BAD_LABEL)
                where = f"item {index}: " if batch else ""
                raise Rejected(422, f"{where}{error}", Outcome.BAD_LABEL) from None
        return labels

    def _admit(self, count: int) -> None:
        limit = self.settings.max_queue
        if count > limit:
            self._account(Outcome.OVERLOADED, count)
            raise Rejected(
                413,
                f"a batch of {count} items is larger than REWARD_MAX_QUEUE={limit}: split it into smaller batches",
                Outcome.OVERLOADED,
            )
        if self.in_flight + count > limit:
            self._account(Outcome.OVERLOADED, count)
            raise Rejected(
                503,
                f"the scoring queue is full ({self.in_flight} of {limit} items in flight); "
                "retry after the Retry-After delay",
                Outcome.OVERLOADED,
                self.settings.retry_after_s,
            )

    def _quick_verdicts(
        self, labels: Sequence[str | None], items: Sequence[ScoreRequest]
    ) -> list[worker.ItemResult | None]:
        limit = self.settings.inline_max_chars
        return [
            worker.quick_verdict(label, item.response, self.settings.extraction, limit)
            if label is not None and limit
            else None
            for label, item in zip(labels, items, strict=True)
        ]

    async def _inline(
        self, labels: Sequence[str | None], items: Sequence[ScoreRequest]
    ) -> list[worker.ItemResult | None]:
        """The verdicts the server finds itself; a request with more text than one loop turn should take is
        judged in a thread, so the event loop (probes, other requests) keeps its turns meanwhile."""
        inline = sum(len(item.response) for item in items if len(item.response) <= self.settings.inline_max_chars)
        if inline <= INLINE_ON_LOOP_CHARS:
            return self._quick_verdicts(labels, items)
        return await asyncio.to_thread(self._quick_verdicts, labels, items)

    async def _score_one(
        self, quick: worker.ItemResult | None, label: str | None, item: ScoreRequest
    ) -> worker.ItemResult:
        if quick is not None:
            return quick
        return await self.pool.score(label, item.response, item.prompt)

    async def score(
        self, items: Sequence[ScoreRequest], batch: bool = False, request_id: str | None = None
    ) -> list[float]:
        """The rewards of `items`; a request id already running or answered gets that work's rewards."""
        if not request_id or len(request_id) > MAX_REQUEST_ID_CHARS:
            return await self._score(items, batch)
        # The id is bound to the body: a reused id with another body is other work, scored anew, never the first
        # body's rewards (a wrong answer would get the right one's 1.0).
        key = f"{request_id}/{len(items)}/{await self._body_digest(items)}"
        answered = self._answered.get(key)
        if answered is not None:
            return answered
        running = self._running.get(key)
        if running is None:
            running = asyncio.ensure_future(self._score(items, batch))
            self._running[key] = running
            running.add_done_callback(lambda done: self._settle(key, done))
        # shield: the client going away (or timing out) leaves the work to its retry
        return await asyncio.shield(running)

    async def _body_digest(self, items: Sequence[ScoreRequest]) -> str:
        if sum(len(item.response) for item in items) <= INLINE_ON_LOOP_CHARS:
            return _items_digest(items)
        return await asyncio.to_thread(_items_digest, items)

    def _settle(self, key: str, done: asyncio.Future[list[float]]) -> None:
        self._running.pop(key, None)
        if done.cancelled() or done.exception() is not None:
            return  # a refusal or a failure is answered, never kept: a retry is admitted afresh
        rewards = done.result()
        self._answered[key] = rewards
        self._answered_items += len(rewards)
        # kept for the retries of clients that timed out; bounded by the queue's size in items
        while self._answered_items > self.settings.max_queue and len(self._answered) > 1:
            _, evicted = self._answered.popitem(last=False)
            self._answered_items -= len(evicted)

    async def _score(self, items: Sequence[ScoreRequest], batch: bool) -> list[float]:
        labels = self._labels(items, batch)
        self._admit(len(items))
        self.in_flight += len(items)
        try:
            quick = await self._inline(labels, items)
            jobs = [self._score_one(*job) for job in zip(quick, labels, items, strict=True)]
            results = await asyncio.gather(*jobs, return_exceptions=True)
        finally:
            self.in_flight -= len(items)
        rewards: list[float] = []
        failure: Rejected | None = None
        for index, (item, result) in enumerate(zip(items, results, strict=True)):
            where = f"item {index}: " if batch else ""
            if isinstance(result, worker.ItemResult):
                outcome = _STATUS_TO_OUTCOME[result.status]
            else:
                outcome = Outcome.SERVICE_ERROR
            self._account(outcome)
            if outcome is Outcome.SERVICE_ERROR:
                log.error("service error while scoring (%s): %s", _digest(item.response), result)
                if not isinstance(result, PoolError):
                    log.error("unexpected error type %s", type(result).__name__)
                failure = Rejected(
                    503,
                    f"{where}the service failed to score this item ({result}); no reward was computed",
                    outcome,
                    self.settings.retry_after_s,
                )
                continue
            assert isinstance(result, worker.ItemResult)
            if outcome is Outcome.BAD_LABEL:
                failure = failure or Rejected(
                    422,
                    f"{where}{result.detail}: send the gold answer as LaTeX or a number math_verify can parse",
                    outcome,
                )
            elif outcome is Outcome.TIMEOUT:
                log.warning("timeout while scoring (%s): %s", _digest(item.response), result.detail)
                if self.settings.on_timeout is TimeoutPolicy.UNAVAILABLE:
                    failure = failure or Rejected(
                        503,
                        f"{where}scoring this response overran its deadline ({result.detail}) and "
                        "REWARD_ON_TIMEOUT=unavailable",
                        outcome,
                        self.settings.retry_after_s,
                    )
            rewards.append(result.reward)
        if failure is not None:
            raise failure
        return rewards


_FIELD_RULES = {
    "label": "must be a string, an integer, a float or null",
    "response": "must be a string (the generated text)",
}


def _validation_message(error: RequestValidationError) -> str:
    problems: dict[str, str] = {}
    for problem in error.errors():
        loc = [str(part) for part in problem.get("loc", ())]
        field = next((name for name in _FIELD_RULES if name in loc), None)
        location = ".".join(loc[: loc.index(field) + 1] if field else loc)
        location = location if len(location) <= 80 else location[:77] + "..."  # a deep body's path is long
        rule = _FIELD_RULES[field] if field else str(problem.get("msg"))
        if problem.get("type") == "missing":
            rule = "is required"
        shown = repr(problem.get("input"))
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        problems.setdefault(location, f"{location} {rule} (got {shown})")
    return (
        "; ".join(problems.values()) + '. Send a JSON object {"prompt": ..., "response": "<text>", '
        '"label": <string, integer, float or null>} (a list of them for /score/batch)'
    )


_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "The body is not JSON"},
    413: {
        "model": ErrorBody,
        "description": "The batch is larger than the queue, or the body than REWARD_MAX_BODY_BYTES",
    },
    422: {"model": ErrorBody, "description": "The body or the gold label cannot be used"},
    503: {"model": ErrorBody, "description": "Queue full or service failure (Retry-After is set)"},
}


_BATCH = TypeAdapter(list[ScoreRequest])
_BATCH_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/ScoreRequest"}}}
        },
    }
}


def _json_content(request: Request) -> bool:
    kind = (request.headers.get("content-type") or "").split(";")[0].strip().lower()  # none: not JSON (strict)
    return kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json"))


async def _batch_items(request: Request) -> list[ScoreRequest]:
    """The batch, parsed and validated in a thread: a 15 MB body is a second of parsing that, on the event loop,
    held `/healthz` past the kubelet's liveness timeout. pydantic's parser holds the GIL only for one call (about
    0.1 s for 15 MB), so the loop answers between the batches' parses. A body that fails is answered as FastAPI
    answers it (`_as_fastapi_would`), so the 400 and 422 messages are unchanged."""
    body = await request.body()
    if body and _json_content(request):
        with contextlib.suppress(ValidationError):
            return await asyncio.to_thread(_BATCH.validate_json, body)
    return _as_fastapi_would(request, body)


def _as_fastapi_would(request: Request, body: bytes) -> list[ScoreRequest]:
    """FastAPI's own reading of a body parameter (fastapi/routing.py, `get_request_handler`): JSON by content type,
    a JSON error as a 422 `json_invalid` at its position, any other decoding error a 400, then the model's errors
    under `body`."""
    if not body:
        raise RequestValidationError([{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}])
    data: Any = body
    if _json_content(request):
        try:
            data = json.loads(body)
        except json.JSONDecodeError as error:
            raise RequestValidationError(
                [
                    {
                        "type": "json_invalid",
                        "loc": ("body", error.pos),
                        "msg": "JSON decode error",
                        "input": {},
                        "ctx": {"error": error.msg},
                    }
                ],
                body=error.doc,
            ) from None
        except Exception as error:
            raise StarletteHTTPException(status_code=400, detail="There was an error parsing the body") from error
    try:
        return _BATCH.validate_python(data)
    except ValidationError as error:
        raise RequestValidationError(
            [{**problem, "loc": ("body", *problem["loc"])} for problem in error.errors(include_url=False)]
        ) from None


async def _watch_pool(pool: ScoringPool, period_s: float = 0.5) -> None:
    while True:
        await asyncio.sleep(period_s)
        await asyncio.to_thread(pool.ensure_running)


def create_app(settings: RewardSettings) -> FastAPI:
    """The app; its lifespan starts the worker pool before serving and stops it on shutdown."""
    service = RewardService(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await asyncio.to_thread(service.pool.start)
        log.info("reward service ready: %s", settings.public_summary())
        watchdog = asyncio.create_task(_watch_pool(service.pool))
        try:
            yield
        finally:
            watchdog.cancel()
            await asyncio.to_thread(service.pool.close)

    app = FastAPI(title="grpo reward service", version="0.1.0", lifespan=lifespan)
    app.state.service = service

    @app.exception_handler(RequestValidationError)
    async def bad_body(request: Request, error: RequestValidationError) -> JSONResponse:
        service.metrics.count(Outcome.BAD_REQUEST)
        return JSONResponse({"detail": _validation_message(error), "outcome": Outcome.BAD_REQUEST.value}, 422)

    app.add_middleware(
        BodyLimit, max_bytes=settings.max_body_bytes, on_refused=lambda: service.metrics.count(Outcome.BAD_REQUEST)
    )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> Response:
        if isinstance(error, BodyTooLarge):
            return JSONResponse(
                {"detail": error.detail, "outcome": Outcome.BAD_REQUEST.value}, 413, headers={"Connection": "close"}
            )
        if error.status_code != 400:
            return await http_exception_handler(request, error)
        service.metrics.count(Outcome.BAD_REQUEST)
        detail = (
            f"the body could not be read as JSON ({error.detail}); send UTF-8 JSON with Content-Type: application/json"
        )
        return JSONResponse({"detail": detail, "outcome": Outcome.BAD_REQUEST.value}, 400)

    async def timed(request: Request, endpoint: str, items: Sequence[ScoreRequest], batch: bool) -> Response:
        started = time.perf_counter()
        try:
            rewards = await service.score(items, batch, request.headers.get("x-request-id"))
        except Rejected as rejected:
            return rejected.response()
        finally:
            service.metrics.latency.labels(endpoint=endpoint).observe(time.perf_counter() - started)
        return JSONResponse(rewards if batch else rewards[0])

    @app.post("/score", response_model=float, responses=_ERRORS)
    async def score(item: ScoreRequest, request: Request) -> Response:
        """Score one sample; the reply is the reward as a bare JSON number."""
        return await timed(request, "score", [item], batch=False)

    @app.post("/score/batch", response_model=list[float], responses=_ERRORS, openapi_extra=_BATCH_BODY)
    async def score_batch(request: Request) -> Response:
        """Score several samples; the reply is the list of rewards, in order (all or nothing)."""
        items = await _batch_items(request)
        return await timed(request, "score_batch", items, batch=True)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        """Liveness: the event loop answers, whatever the worker pool is doing."""
        return {"status": "ok"}

    @app.get("/ready", responses={503: {"model": ErrorBody}})
    async def ready() -> JSONResponse:
        """Readiness: a worker is alive and the recent service-error ratio is under the threshold."""
        reason = service.not_ready_reason()
        items, errors = service.health.counts()
        body = {"workers": service.pool.alive_workers(), "items_in_window": items, "service_errors": errors}
        if reason:
            return JSONResponse({"detail": reason, "outcome": "not_ready", **body}, 503)
        return JSONResponse({"status": "ready", **body})

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics() -> Response:
        """Prometheus text exposition format."""
        return Response(generate_latest(service.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/")
    async def index() -> dict[str, Any]:
        return {"service": "grpo reward service", "settings": settings.public_summary()}

    return app
