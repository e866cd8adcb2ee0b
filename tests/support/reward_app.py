"""The reward service's app in process, as the tests of its rules and outcomes drive it: `client(**settings)` is a
FastAPI TestClient over `create_app` with one scoring worker unless told, and `counted(service, outcome)` reads
`reward_service_requests_total{outcome=...}` from its `/metrics` as a scraper would."""

from __future__ import annotations

import re
from typing import Any

from fastapi.testclient import TestClient
from reward_service.app import create_app
from reward_service.settings import RewardSettings


def client(**settings: Any) -> TestClient:
    return TestClient(create_app(RewardSettings(**{"workers": 1, **settings})))


def counted(service: TestClient, outcome: str) -> float:
    text = service.get("/metrics").text
    found = re.search(rf'^reward_service_requests_total{{outcome="{outcome}"}} (\S+)$', text, re.MULTILINE)
    assert found is not None, text
    return float(found.group(1))
