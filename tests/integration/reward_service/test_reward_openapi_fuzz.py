"""Schemathesis against the running service's own OpenAPI: no server error, replies match the schema.

Every operation is fuzzed with schema-valid and schema-invalid inputs; the example count is kept modest
(30 per operation and mode) because the suite runs on 2 shared cores.
"""

from __future__ import annotations

import hypothesis
import pytest
import schemathesis
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from tests.support.reward_harness import RewardServer

pytestmark = pytest.mark.integration

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_the_api_never_answers_with_a_server_error(shared_server: RewardServer, mode: GenerationMode) -> None:
    schema = schemathesis.openapi.from_url(shared_server.url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.label for op in operations} >= {"POST /score", "POST /score/batch", "GET /ready"}
    for operation in operations:
        if mode is GenerationMode.NEGATIVE and not operation.label.startswith("POST"):
            continue  # nothing to make invalid in a GET without parameters

        @hypothesis.given(case=operation.as_strategy(generation_mode=mode))
        @hypothesis.settings(
            max_examples=30, deadline=None, database=None, suppress_health_check=list(hypothesis.HealthCheck)
        )
        def fuzz(case: schemathesis.Case) -> None:
            case.call_and_validate(checks=CHECKS, timeout=60)

        fuzz()
    assert shared_server.outcome("service_error") == 0
