"""The launcher's `GRPO_RESUME {json}` line (grpo_launcher.launch `resume_line`), which the operator reads from the
running job's log to judge the attempt before's save: the line is found among Ray's and miles's lines, and
anything malformed reads as no line (the save stays unjudged), never as a checkpoint."""

from __future__ import annotations

import pytest
from grpo_operator.status.observation import Resume
from grpo_operator.status.summary import parse_resume


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param('GRPO_RESUME {"iteration": 7, "dataState": true, "load": "/c"}', Resume(7, True), id="saved"),
        pytest.param('GRPO_RESUME {"iteration": 7, "dataState": false}', Resume(7, False), id="no-data-state"),
        pytest.param('GRPO_RESUME {"iteration": null, "dataState": false}', Resume(None, False), id="from-nothing"),
        pytest.param(
            'provenance ...\n(raylet) x\nGRPO_RESUME {"iteration": 0, "dataState": true}\n[info] starting miles',
            Resume(0, True),
            id="among-other-lines",
        ),
        pytest.param('GRPO_RESUME {"iteration": -3}', None, id="negative"),
        pytest.param('GRPO_RESUME {"iteration": true}', None, id="a-bool"),
        pytest.param('GRPO_RESUME {"iteration": "7"}', None, id="a-string"),
        pytest.param("GRPO_RESUME {not json", None, id="not-json"),
        pytest.param("GRPO_RESUME [7]", None, id="not-an-object"),
        pytest.param("[info] starting miles", None, id="no-line-yet"),
    ],
)
def test_the_resume_line_is_read_or_reads_as_none(text: str, expected: Resume | None) -> None:
    assert parse_resume(text) == expected
