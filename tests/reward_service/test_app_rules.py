"""What a client of the reward service gets back for each kind of request, in process (FastAPI's TestClient):
rewards in order, the refusals with their status, field and fix, a retry that carries its request id answered
from the work already done, the probes and the counters `/metrics` exports.

No worker pool is started here: integer answers are scored by the server itself, and an item that needs a
worker meets a pool that is not running, which is a service failure (503), never a reward. The scoring done by
workers is in test_worker_verdicts.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.reward_app import client, counted

NEEDS_A_WORKER = {"response": "so $\\boxed{0.5}$", "label": "\\frac{1}{2}"}


def item(answer: str | None = "15", label: object = 15) -> dict[str, Any]:
    return {"prompt": "p", "response": f"so $\\boxed{{{answer}}}$" if answer is not None else "no idea", "label": label}


def test_one_item_gets_a_bare_number_and_a_batch_a_list_in_order() -> None:
    service = client()
    assert service.post("/score", json=item("15")).json() == 1.0
    assert service.post("/score", json=item("16")).json() == 0.0
    batch = service.post("/score/batch", json=[item("16"), item("15"), item(None), item("-3", -3)])
    assert batch.status_code == 200 and batch.json() == [0.0, 1.0, 0.0, 1.0]
    assert (counted(service, "scored"), counted(service, "no_answer")) == (5.0, 1.0)


def test_an_empty_batch_gets_an_empty_list() -> None:
    assert client().post("/score/batch", json=[]).json() == []


@pytest.mark.parametrize(("label", "says"), [(None, "label is null"), ("  ", "label is empty"), ("", "label is empty")])
def test_an_unusable_label_is_refused_with_422_naming_the_item_in_a_batch(label: object, says: str) -> None:
    service = client()
    one = service.post("/score", json=item(label=label))
    assert one.status_code == 422 and one.json()["outcome"] == "bad_label"
    assert one.json()["detail"].startswith(says)
    batch = service.post("/score/batch", json=[item(), item(label=label)])
    assert batch.status_code == 422 and batch.json()["detail"].startswith(f"item 1: {says}")
    assert counted(service, "bad_label") == 2.0 and counted(service, "scored") == 0.0


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"label": 1}, "response is required (got {'label': 1})"),
        ({"response": 5, "label": 1}, "response must be a string (the generated text) (got 5)"),
        ({"response": "x", "label": [1]}, "label must be a string, an integer, a float or null (got [1])"),
    ],
    ids=["no response", "a number for the response", "a list for the label"],
)
def test_a_body_that_does_not_fit_the_schema_is_refused_naming_the_field_and_the_fix(
    body: dict[str, Any], says: str
) -> None:
    service = client()
    refused = service.post("/score", json=body)
    assert refused.status_code == 422 and refused.json()["outcome"] == "bad_request"
    assert refused.json()["detail"].startswith("body." + says)
    assert refused.json()["detail"].endswith("(a list of them for /score/batch)")
    assert counted(service, "bad_request") == 1.0


def test_a_batch_items_field_is_named_by_its_place() -> None:
    refused = client().post("/score/batch", json=[item(), {"response": "x", "label": {"a": 1}}])
    assert refused.status_code == 422
    assert refused.json()["detail"].startswith("body.1.label must be a string, an integer, a float or null")


def test_a_body_that_is_not_json_is_refused_with_the_fix() -> None:
    service = client()
    refused = service.post("/score", content=b"{not json", headers={"Content-Type": "application/json"})
    assert refused.status_code == 422 and refused.json()["outcome"] == "bad_request"
    assert (
        "JSON decode error" in refused.json()["detail"] and 'Send a JSON object {"prompt"' in refused.json()["detail"]
    )
    assert counted(service, "bad_request") == 1.0


def test_an_unknown_route_is_an_ordinary_404() -> None:
    missing = client().post("/scores", json=item())
    assert missing.status_code == 404 and missing.json() == {"detail": "Not Found"}


def test_a_body_over_the_limit_is_refused_with_413_before_it_is_read() -> None:
    service = client(max_body_bytes=1024)
    refused = service.post("/score", json={"response": "x" * 2000, "label": 1})
    assert refused.status_code == 413 and refused.json()["outcome"] == "bad_request"
    assert counted(service, "bad_request") == 1.0


def test_an_item_no_worker_can_score_is_a_503_with_retry_after_never_a_reward() -> None:
    service = client(retry_after_s=7)
    failed = service.post("/score/batch", json=[item(), NEEDS_A_WORKER])
    assert failed.status_code == 503 and failed.headers["retry-after"] == "7"
    assert failed.json() == {
        "detail": "item 1: the service failed to score this item (the worker pool is not running); "
        "no reward was computed",
        "outcome": "service_error",
    }
    assert counted(service, "service_error") == 1.0 and counted(service, "scored") == 1.0
    one = service.post("/score", json=NEEDS_A_WORKER)
    assert one.status_code == 503 and one.json()["detail"].startswith("the service failed to score")
    ready = service.get("/ready").json()  # the failures count towards readiness, the refusals do not
    assert (ready["items_in_window"], ready["service_errors"]) == (3, 2)


def test_inline_scoring_off_sends_every_item_to_a_worker() -> None:
    assert client(inline_max_chars=0).post("/score", json=item()).status_code == 503


def test_a_response_longer_than_the_inline_limit_goes_to_a_worker() -> None:
    service = client(inline_max_chars=20)
    assert service.post("/score", json={"response": "$\\boxed{15}$".rjust(20), "label": 15}).json() == 1.0
    assert service.post("/score", json={"response": "$\\boxed{15}$".rjust(21), "label": 15}).status_code == 503


def test_a_batch_with_more_text_than_one_loop_turn_gets_the_same_rewards() -> None:
    long = [{"response": "x" * 9000 + f"$\\boxed{{{n}}}$", "label": 7} for n in (7, 8, 7)]
    assert client().post("/score/batch", json=long).json() == [1.0, 0.0, 1.0]


def test_a_batch_filling_the_queue_exactly_is_admitted() -> None:
    service = client(max_queue=4)
    service.app.state.service.in_flight = 2  # type: ignore[attr-defined]
    assert service.post("/score/batch", json=[item(), item()]).json() == [1.0, 1.0]
    assert client(max_queue=4).post("/score/batch", json=[item()] * 4).json() == [1.0] * 4


def test_a_refused_batch_is_counted_as_overloaded_per_item() -> None:
    service = client(max_queue=2)
    assert service.post("/score/batch", json=[item()] * 3).status_code == 413
    assert counted(service, "overloaded") == 3.0 and counted(service, "scored") == 0.0


def test_a_retry_with_the_same_request_id_gets_the_rewards_already_computed() -> None:
    service = client()
    first = service.post("/score/batch", json=[item("15"), item("16")], headers={"X-Request-Id": "a"})
    again = service.post("/score/batch", json=[item("15"), item("16")], headers={"X-Request-Id": "a"})
    assert first.json() == again.json() == [1.0, 0.0]
    assert counted(service, "scored") == 2.0  # scored once
    service.post("/score", json=item("15"), headers={"X-Request-Id": "a"})  # another item count: new work
    service.post("/score/batch", json=[item("15"), item("16")], headers={"X-Request-Id": "b"})
    assert counted(service, "scored") == 5.0


def test_a_request_id_over_128_characters_is_not_used() -> None:
    service = client()
    for request_id in ("x" * 128, "x" * 128, "y" * 129, "y" * 129):
        service.post("/score", json=item(), headers={"X-Request-Id": request_id})
    assert counted(service, "scored") == 3.0


def test_a_refusal_is_not_kept_for_the_retry() -> None:
    service = client(max_queue=2)
    service.app.state.service.in_flight = 2  # type: ignore[attr-defined]
    assert service.post("/score", json=item(), headers={"X-Request-Id": "r"}).status_code == 503
    assert counted(service, "overloaded") == 1.0
    service.app.state.service.in_flight = 0  # type: ignore[attr-defined]
    assert service.post("/score", json=item(), headers={"X-Request-Id": "r"}).json() == 1.0


def test_answers_kept_for_retries_are_bounded_by_the_queue_size_oldest_first() -> None:
    service = client(max_queue=3)
    for request_id in ("a", "b", "c", "d"):  # one item each: "a" no longer fits
        service.post("/score", json=item(), headers={"X-Request-Id": request_id})
    assert counted(service, "scored") == 4.0
    service.post("/score", json=item(), headers={"X-Request-Id": "d"})
    service.post("/score", json=item(), headers={"X-Request-Id": "b"})
    assert counted(service, "scored") == 4.0
    service.post("/score", json=item(), headers={"X-Request-Id": "a"})
    assert counted(service, "scored") == 5.0


def test_one_answer_larger_than_the_queue_is_still_kept_for_its_retry() -> None:
    service = client(max_queue=2)
    service.post("/score/batch", json=[item()] * 2, headers={"X-Request-Id": "big"})
    service.post("/score/batch", json=[item()] * 2, headers={"X-Request-Id": "big"})
    assert counted(service, "scored") == 2.0


def test_the_probes_and_the_index() -> None:
    service = client(max_queue=9)
    assert service.get("/healthz").json() == {"status": "ok"}
    ready = service.get("/ready")
    assert ready.status_code == 503
    assert ready.json() == {
        "detail": "no scoring worker is alive",
        "outcome": "not_ready",
        "workers": 0,
        "items_in_window": 0,
        "service_errors": 0,
    }
    index = service.get("/").json()
    assert index["service"] == "grpo reward service" and index["settings"]["max_queue"] == 9


def test_metrics_export_every_outcome_from_the_start_and_the_live_gauges() -> None:
    service = client(workers=3)
    text = service.get("/metrics").text
    for outcome in ("scored", "no_answer", "timeout", "bad_label", "bad_request", "overloaded", "service_error"):
        assert counted(service, outcome) == 0.0
    assert "reward_service_pool_workers_desired 3.0" in text
    assert "reward_service_ready 0.0" in text and "reward_service_queue_depth 0.0" in text
    service.post("/score", json=item())
    service.post("/score/batch", json=[item()])
    after = service.get("/metrics").text
    assert 'reward_service_request_duration_seconds_count{endpoint="score"} 1.0' in after
    assert 'reward_service_request_duration_seconds_count{endpoint="score_batch"} 1.0' in after
    assert "reward_service_queue_depth 0.0" in after  # every admitted item left the queue
