"""miles's remote_rm client against the real service.

`remote_rm` below makes the same calls as radixark/miles `miles/rollout/rm_hub/__init__.py` (read at
commit 03f9cab): one new `aiohttp.ClientSession` per sample, `session.post(args.rm_url, json=payload)`
with payload `{"prompt", "response", "label"}`, `resp.raise_for_status()`, `await resp.json()`; and
`batched_async_rm` gathers a group without `return_exceptions`. The reward must come back as a number
that `torch.tensor` accepts: a bare JSON number.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from tests.support.reward_harness import RewardServer

pytestmark = pytest.mark.integration

# A prompt as miles sends it with --apply-chat-template: the templated string, special tokens included.
PROMPT = (
    "<|im_start|>user\nHow many ways are there to choose 2 of 6 people? The last line of your response "
    "should be of the form Answer: $Answer<|im_end|>\n<|im_start|>assistant\n"
)


async def remote_rm(rm_url: str, sample: dict[str, Any]) -> Any:
    payload = {"prompt": sample["prompt"], "response": sample["response"], "label": sample["label"]}
    async with aiohttp.ClientSession() as session, session.post(rm_url, json=payload) as resp:
        resp.raise_for_status()
        return await resp.json()


async def batched_async_rm(rm_url: str, samples: list[dict[str, Any]]) -> list[Any]:
    return list(await asyncio.gather(*[remote_rm(rm_url, sample) for sample in samples]))


def group(label: Any) -> list[dict[str, Any]]:
    """8 samples of one prompt (--n-samples-per-prompt 8): right, wrong, equivalent, boxed, missing."""
    endings = [
        "Answer: 15",
        "Answer: 14",
        "Answer: $15.0$",
        "So $\\boxed{15}$.",
        "Answer: $\\frac{30}{2}$",
        "I am not sure.",
        "Answer: 16",
        "$\\boxed{}$",
    ]
    thinking = "<think>We need $\\binom{6}{2} = \\frac{6 \\cdot 5}{2} = 15$.</think>\n"
    return [{"prompt": PROMPT, "response": thinking + end, "label": label} for end in endings]


@pytest.mark.parametrize("label", [15, 15.0, "15"])
def test_remote_rm_gets_a_number_per_sample_for_integer_float_and_string_labels(
    shared_server: RewardServer, label: Any
) -> None:
    rewards = asyncio.run(batched_async_rm(shared_server.url + "/score", group(label)))
    assert rewards == [1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    assert all(type(reward) is float for reward in rewards)


def test_a_chat_message_prompt_is_accepted_as_miles_sends_it_without_a_template(
    shared_server: RewardServer,
) -> None:
    sample = {"prompt": [{"role": "user", "content": "2+2?"}], "response": "Answer: 4", "label": 4}
    assert asyncio.run(remote_rm(shared_server.url + "/score", sample)) == 1.0


def test_a_service_failure_reaches_remote_rm_as_an_http_error_not_as_a_reward(
    shared_server: RewardServer,
) -> None:
    samples = group(15)
    samples[5]["label"] = None  # unusable gold: the whole group fails in miles, as it should
    with pytest.raises(aiohttp.ClientResponseError) as failure:
        asyncio.run(batched_async_rm(shared_server.url + "/score", samples))
    assert failure.value.status == 422
