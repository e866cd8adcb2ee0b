"""The evidence capture runs before a stop, so it has one deadline for all its requests, sent side by side: a Ray
pod whose agent never answers (a dead node) costs the capture its budget, not 30 s per actor, and the bundle says
what is missing and why; every piece that did answer is kept. Ray is played at the HTTP edge (`_get`) and the Jobs
client (`_client`); what the real dashboard serves is tests/integration/operator/test_evidence.py."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from grpo_operator.edges.rayjobs import RayJobs

ACTORS = [
    {"state": "ALIVE", "node_id": "live", "pid": 11, "class_name": "RolloutManager", "actor_id": "aaaaaaaa1"},
    {"state": "ALIVE", "node_id": "dead", "pid": 12, "class_name": "MegatronTrainRayActor", "actor_id": "bbbbbbbb2"},
]


class Answer:
    def __init__(self, body: Any) -> None:
        self.ok, self.status_code = True, 200
        self.text = body if isinstance(body, str) else json.dumps(body)

    def json(self) -> Any:
        return json.loads(self.text)


class PlayedRay(RayJobs):
    """A head whose agent on node `dead` never answers until released."""

    def __init__(self, released: threading.Event) -> None:
        super().__init__("http://head:8265", "token")
        self.released = released

    def _client(self) -> Any:
        info = SimpleNamespace(
            job_id="02000000",
            driver_info=SimpleNamespace(node_ip_address="10.0.0.5", pid=7),
            driver_node_id="live",
            status="RUNNING",
            entrypoint="x",
            message="",
            start_time=0,
            end_time=None,
            metadata={},
            runtime_env={},
        )
        return SimpleNamespace(get_job_info=lambda _sid: info)

    def _get(self, path: str, params: dict[str, str], timeout: float = 30.0) -> Any:
        if path == "/worker/traceback" and params.get("node_id") == "dead":
            self.released.wait(timeout)  # the agent of a lost node: no answer until the request's own timeout
            raise AssertionError("the capture waited for a dead node's agent past its budget")
        if path == "/api/v0/actors":
            return Answer({"data": {"result": {"result": ACTORS}}})
        if path == "/worker/traceback":
            return Answer(f"Thread 0x1 (most recent call first):\n  File x.py, in sleeping_in_pid_{params['pid']}")
        if path == "/api/v0/logs/file":
            return Answer("driver log line")
        return Answer({"data": {"result": []}})


@pytest.fixture
def released() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def test_a_dead_nodes_agent_costs_the_budget_and_the_bundle_says_what_is_missing(released: threading.Event) -> None:
    # The budget is what the dead agent costs; the live requests answer at once, well inside it on a loaded machine.
    pieces = PlayedRay(released).evidence("grpo-x-1", budget_seconds=5.0, py_spy=True)
    assert not released.is_set()  # the dead agent never answered: the capture ended on its budget
    stacks = pieces["stacks.txt"]
    assert "sleeping_in_pid_7" in stacks and "sleeping_in_pid_11" in stacks, stacks  # the driver, the live actor
    assert "actor-MegatronTrainRayActor-bbbbbbbb: not collected within the capture's budget" in stacks, stacks
    assert pieces["missing.txt"] == "actor-MegatronTrainRayActor-bbbbbbbb: not collected within the capture's budget\n"
    assert pieces["driver.log"] == "driver log line" and json.loads(pieces["job.json"])
