"""The optional `reward_model` backend: a Hugging Face sequence classifier run on CPU in a worker.

Loaded once per worker process (by `worker.initialize`), only when `REWARD_BACKEND=reward_model`; torch
and transformers come from the `reward-model` extra, and `settings.check_backend_available` refuses to
start without them. A chat prompt (a list of `{role, content}` messages) is flattened by joining the
contents. The reward is the single logit of a one-output head, or the last class's logit otherwise.
"""

from __future__ import annotations

import importlib
import json
from typing import Any


def prompt_text(prompt: Any) -> str:
    """The prompt as plain text: a string as is, chat messages by their contents, anything else as JSON."""
    if prompt is None:
        return ""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and all(isinstance(m, dict) for m in prompt):
        return "\n".join(str(m.get("content", "")) for m in prompt)
    return json.dumps(prompt, ensure_ascii=False)


class RewardModel:
    """A CPU sequence-classification model scoring (prompt, response) pairs."""

    def __init__(self, model_name: str, max_length: int, torch_threads: int) -> None:
        # imported here: the packages are an optional extra, needed only by this backend
        torch: Any = importlib.import_module("torch")
        transformers: Any = importlib.import_module("transformers")
        torch.set_num_threads(torch_threads)
        self._torch = torch
        self._max_length = max_length
        self._tokenizer = transformers.AutoTokenizer.from_pretrained(model_name)
        self._model = transformers.AutoModelForSequenceClassification.from_pretrained(
            model_name, torch_dtype=torch.float32
        )
        self._model.eval()

    def score(self, prompt: Any, response: str) -> float:
        inputs = self._tokenizer(
            prompt_text(prompt), response, truncation=True, max_length=self._max_length, return_tensors="pt"
        )
        with self._torch.no_grad():
            logits = self._model(**inputs).logits[0]
        return float(logits[-1].item())
