"""Prompt files: JSONL conversations for `capture` and `speculate`, streamed one line at a time.

Three record shapes are accepted, one JSON object per line (blank lines are skipped):

- `{"prompt": "..."}`, optionally with the answer under `"response"`, `"completion"` or
  `"answer"`: one user turn (and one assistant turn);
- `{"messages": [{"role": "user", "content": "..."}, ...]}`: OpenAI chat;
- `{"conversations": [{"from": "human", "value": "..."}, ...]}`: ShareGPT (`human`/`user`,
  `gpt`/`assistant`/`model`/`chatgpt`, `system`).

Every record becomes a list of `{"role", "content"}` messages with roles `system`, `user`,
`assistant`. A line that is not one of these is one `BadInputError` naming the file and line.
Nothing here imports torch.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from helpers.core.errors import BadInputError

_ANSWER_KEYS = ("response", "completion", "answer")
_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                   "model": "assistant", "chatgpt": "assistant", "bing": "assistant", "system": "system"}
_ROLES = {"system", "user", "assistant"}


@dataclass(frozen=True)
class Conversation:
    """One prompt-file record: its 0-based index among the records and its messages."""

    index: int
    messages: tuple[dict, ...]

    @property
    def has_answer(self) -> bool:
        return any(m["role"] == "assistant" for m in self.messages)

    def prompt_messages(self) -> list[dict]:
        """The messages before the final assistant turn(s): what a model is asked to continue."""
        msgs = list(self.messages)
        while msgs and msgs[-1]["role"] == "assistant":
            msgs.pop()
        return msgs


def _messages(obj, where: str, path: Path) -> list[dict]:
    if not isinstance(obj, dict):
        raise BadInputError(path, f"{where}: expected a JSON object, got {type(obj).__name__}")
    if "messages" in obj:
        raw = obj["messages"]
        if not isinstance(raw, list) or not raw:
            raise BadInputError(path, f"{where}: 'messages' must be a non-empty list")
        out = []
        for m in raw:
            if not isinstance(m, dict) or m.get("role") not in _ROLES or not isinstance(m.get("content"), str):
                raise BadInputError(path, f"{where}: each message needs a role (system, user, assistant) and a "
                                    f"string content, got {json.dumps(m)[:80]}")
            out.append({"role": m["role"], "content": m["content"]})
        return out
    if "conversations" in obj:
        raw = obj["conversations"]
        if not isinstance(raw, list) or not raw:
            raise BadInputError(path, f"{where}: 'conversations' must be a non-empty list")
        out = []
        for m in raw:
            role = _SHAREGPT_ROLES.get(str(m.get("from", "")).lower()) if isinstance(m, dict) else None
            if role is None or not isinstance(m.get("value"), str):
                raise BadInputError(path, f"{where}: a ShareGPT turn needs 'from' (human, gpt, system) and a "
                                    f"string 'value', got {json.dumps(m)[:80]}")
            out.append({"role": role, "content": m["value"]})
        return out
    if "prompt" in obj:
        if not isinstance(obj["prompt"], str):
            raise BadInputError(path, f"{where}: 'prompt' must be a string")
        out = [{"role": "user", "content": obj["prompt"]}]
        answer = next((obj[k] for k in _ANSWER_KEYS if k in obj), None)
        if answer is not None:
            if not isinstance(answer, str):
                raise BadInputError(path, f"{where}: the answer must be a string")
            out.append({"role": "assistant", "content": answer})
        return out
    raise BadInputError(path, f"{where}: a record needs 'prompt', 'messages' (OpenAI chat) or 'conversations' "
                        f"(ShareGPT); got keys {sorted(obj)[:6]}")


def read_prompts(path: str | os.PathLike, max_records: int | None = None) -> Iterator[Conversation]:
    """Stream the records of a JSONL prompt file as `Conversation`s (at most `max_records`)."""
    path = Path(path)
    if not path.is_file():
        raise BadInputError(path, "no such prompt file" if not path.exists() else "is not a file (expected JSONL)")
    index = 0
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if max_records is not None and index >= max_records:
                return
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise BadInputError(path, f"line {lineno} is not JSON ({e.msg})") from None
            yield Conversation(index, tuple(_messages(obj, f"line {lineno}", path)))
            index += 1


def count_prompts(path: str | os.PathLike, max_records: int | None = None) -> int:
    """How many records `read_prompts` yields (the file is validated on the way)."""
    return sum(1 for _ in read_prompts(path, max_records))


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
