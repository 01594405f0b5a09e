"""Prompt files: JSONL conversations for `capture` and `speculate`, streamed one line at a time.

Three record shapes are accepted, one JSON object per line (blank lines are skipped):

- `{"prompt": "..."}`, optionally with the answer under `"response"`, `"completion"` or
  `"answer"`: one user turn (and one assistant turn);
- `{"messages": [{"role": "user", "content": "..."}, ...]}`: OpenAI chat;
- `{"conversations": [{"from": "human", "value": "..."}, ...]}`: ShareGPT (`human`/`user`,
  `gpt`/`assistant`/`model`/`chatgpt`, `system`).

Every record becomes a list of `{"role", "content"}` messages with roles `system`, `user`,
`assistant`, and needs at least one user turn (a chat template has nothing to answer without
one). A line that is not one of these, or is not UTF-8, is one `BadInputError` naming the file
and line. `check_prompts` reads the whole file that way before anything heavy loads; the door
(`helpers.model.preflight`), which checks the path itself first, keeps the records it read
(`prompt_records`) for the stages after it. Nothing here imports torch.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from helpers.core.errors import BadInputError, clip

_ANSWER_KEYS = ("response", "completion", "answer")
_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                   "model": "assistant", "chatgpt": "assistant", "bing": "assistant", "system": "system"}
_ROLES = {"system", "user", "assistant"}


@dataclass(frozen=True)
class Conversation:
    """One prompt-file record: its 0-based index among the records and its messages."""

    index: int
    messages: tuple[dict, ...]
    line: int = 0  # 1-based line of the file it came from (0: not from a file)

    @property
    def has_answer(self) -> bool:
        return any(m["role"] == "assistant" for m in self.messages)

    def prompt_messages(self) -> list[dict]:
        """The messages before the final assistant turn(s): what a model is asked to continue."""
        msgs = list(self.messages)
        while msgs and msgs[-1]["role"] == "assistant":
            msgs.pop()
        return msgs


def _short(obj, n: int = 80) -> str:
    """A record shown in a message: whole when short, else cut after a word with " ..."."""
    return clip(json.dumps(obj, ensure_ascii=False), n)


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
                                    f"string content, got {_short(m)}")
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
                                    f"string 'value', got {_short(m)}")
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


def _with_user_turn(msgs: list[dict], where: str, path: Path) -> list[dict]:
    if not any(m["role"] == "user" for m in msgs):
        roles = ", ".join(dict.fromkeys(m["role"] for m in msgs))
        raise BadInputError(path, f"{where}: the conversation has no user turn (roles: {roles}); every record "
                            "needs one for the chat template to answer")
    return msgs


def read_prompts(path: str | os.PathLike, max_records: int | None = None) -> Iterator[Conversation]:
    """Stream the records of a JSONL prompt file as `Conversation`s (at most `max_records`), the path
    checked first (`helpers.io.inputs.input_path`)."""
    from helpers.io.inputs import input_path

    input_path(path, "prompt file", kind="file")
    yield from stream_prompts(path, max_records)


def stream_prompts(path: str | os.PathLike, max_records: int | None = None) -> Iterator[Conversation]:
    """`read_prompts` of a path already checked (the door, `helpers.model.preflight`, checks it first)."""
    path = Path(path)
    index = 0
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            if max_records is not None and index >= max_records:
                return
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise BadInputError(path, f"line {lineno} is not UTF-8 text (byte 0x{raw[e.start]:02x} at column "
                                    f"{len(raw[:e.start].decode('utf-8', 'replace')) + 1}); save the prompt file as "
                                    "UTF-8") from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line.rstrip("\r\n"))
            except json.JSONDecodeError as e:
                raise BadInputError(path, f"line {lineno} is not JSON ({e.msg} at column {e.colno})") from None
            msgs = _with_user_turn(_messages(obj, f"line {lineno}", path), f"line {lineno}", path)
            yield Conversation(index, tuple(msgs), lineno)
            index += 1


def check_prompts(path, max_records: int | None = None, *, need_answer: bool = False,
                  flag: str = "--max-prompts") -> int:
    """The door for a prompt file: every record read (at most `max_records`, which must be at
    least 1), each with a user turn and, when `need_answer` (teacher-forcing), an assistant
    answer; returns how many. One `BadInputError` naming the file and line otherwise."""
    return sum(1 for _ in _checked(path, max_records, need_answer, flag, read_prompts(path, max_records)))


def prompt_records(path, max_records: int | None = None, *, need_answer: bool = False,
                   flag: str = "--max-prompts") -> tuple[Conversation, ...]:
    """`check_prompts` of a path the door has checked already (`helpers.io.inputs.input_path` first):
    the records themselves, read once, for the stages after the door (`Inputs.records`)."""
    return tuple(_checked(path, max_records, need_answer, flag, stream_prompts(path, max_records)))


def _checked(path, max_records, need_answer: bool, flag: str, records) -> Iterator[Conversation]:
    if max_records is not None and int(max_records) < 1:
        raise BadInputError(None, f"{flag} must be at least 1, got {max_records}")
    n = 0
    for rec in records:
        if need_answer and not rec.has_answer:
            raise BadInputError(path, f"line {rec.line}: the record has no assistant answer to teacher-force "
                                "(pass --regenerate to let the target answer)")
        n += 1
        yield rec
    if n == 0:
        raise BadInputError(path, "holds no prompt records (every line is blank)")


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
