"""Conversations to token ids with a loss mask that is 1 exactly on the assistant's tokens.

With a chat template (`template=True` and the tokenizer has one) the conversation is rendered by
the tokenizer's own template, as the engines render it. The assistant tokens are found by the
template's `{% generation %}` markers when it has them (the Hugging Face convention), otherwise
by where each assistant message's text lies in the rendered string (token offsets): a token is
an assistant token when it lies inside an assistant message's text. Without a template the
messages' texts are joined as they are, each tokenized on its own, so the mask is exact.

`prompt_ids` gives the ids a model is asked to continue (the messages before the final
assistant turn, with the template's generation prompt).
"""
from __future__ import annotations

from helpers.core.errors import BadInputError


def uses_template(tokenizer, chat_template: str) -> bool:
    """`--chat-template auto|none` -> whether to render with the tokenizer's template."""
    if chat_template not in ("auto", "none"):
        raise BadInputError(None, f"--chat-template must be auto or none, got {chat_template!r}")
    return chat_template == "auto" and bool(getattr(tokenizer, "chat_template", None))


def _plain(tokenizer, messages) -> tuple[list[int], list[int]]:
    ids: list[int] = []
    mask: list[int] = []
    for m in messages:
        piece = tokenizer(m["content"], add_special_tokens=False)["input_ids"]
        ids += piece
        mask += [int(m["role"] == "assistant")] * len(piece)
    return ids, mask


def _templated(tokenizer, messages) -> tuple[list[int], list[int]]:
    if "generation" in (tokenizer.chat_template or ""):
        out = tokenizer.apply_chat_template(list(messages), tokenize=True, return_dict=True,
                                            return_assistant_tokens_mask=True)
        return list(out["input_ids"]), [int(x) for x in out["assistant_masks"]]
    text = tokenizer.apply_chat_template(list(messages), tokenize=False)
    spans, start = [], 0
    for m in messages:  # each message's text, found in order in the rendered string
        at = text.find(m["content"], start) if m["content"] else -1
        if at < 0:
            continue
        if m["role"] == "assistant":
            spans.append((at, at + len(m["content"])))
        start = at + len(m["content"])
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    mask = [int(any(a <= s and e <= b and e > s for a, b in spans)) for s, e in enc["offset_mapping"]]
    return list(enc["input_ids"]), mask


def encode_conversation(tokenizer, messages, template: bool) -> tuple[list[int], list[int]]:
    """(input_ids, loss_mask) of a whole conversation, answers included (teacher forcing)."""
    return _templated(tokenizer, messages) if template else _plain(tokenizer, messages)


def prompt_ids(tokenizer, messages, template: bool) -> list[int]:
    """The ids of `messages` (no final assistant turn) that a model continues."""
    if not template:
        return _plain(tokenizer, messages)[0]
    text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])
