"""The target side of engine-free speculative decoding: the target's KV cache over the verified
sequence, the verify forward's attention masks (one per attention type), and keeping the
accepted rows.

The cache holds every row in every layer (`transformers`' `DynamicLayer`), full and sliding
layers alike, so after every round row i is position i of the accepted sequence. We do not use
the sliding layers' own cache (`DynamicSlidingWindowLayer`, what `DynamicCache(config=...)` builds
for them): it keeps only the last W - 1 rows, so the rows a rejected node pushed out are gone
(cropping past the window raises) and a kept row cannot be picked by index; and a tree's 4-D mask
would be one tensor sized for the full layers. The price is memory: a sliding layer holds the
whole sequence, as a full layer does.

The window rule (transformers' `masking_utils.sliding_window_overlay`, the rule the model
applies in its own `generate`): in a sliding layer with window W, a query at position p sees the
keys at positions p - W + 1 .. p, W tokens, itself included. A verify node at depth d sits at
position n + d (n: tokens in the cache before the round), so among the context it sees the rows
n + d - W + 1 .. n - 1, and among the tree its ancestors at positions n + depth(a) > n + d - W and
itself. Full layers see the whole context, the ancestors and the node itself.

A chain is passed without a mask: the model builds its own per-type masks from the cache length,
which over rows kept this way are exactly the window rule above. A tree is passed one additive
mask per attention type: a dict {type: mask} when the layers mix types (GPT-OSS, Gemma 2/3: the
form their models accept), the one tensor when every layer has the same type (Mistral, Llama).
"""
from __future__ import annotations

import inspect

import torch

from helpers.model.drafter import Proposal
from helpers.model.target import SLIDING_ATTENTION, attention_layout


def cache_argument(model) -> str:
    """transformers >= 5.2x names the KV cache argument `cache`; earlier ones `past_key_values`."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def allowed_rows(prop: Proposal, n: int, window: int | None = None) -> torch.Tensor:
    """[size, n + size] bool: which rows each verify node attends to (see the window rule above);
    `window` None: a full-attention layer."""
    size = prop.size
    allowed = torch.zeros(size, n + size, dtype=torch.bool)
    allowed[:, :n] = True
    for i in range(size):
        j = i
        while j >= 0:
            allowed[i, n + j] = True
            j = prop.parent[j]
    if window is not None:
        qpos = n + torch.tensor(prop.depth)  # [size] the nodes' positions
        kpos = torch.cat([torch.arange(n), qpos])  # [n + size] the rows' positions
        allowed &= kpos[None, :] > qpos[:, None] - int(window)
    return allowed


def additive(allowed: torch.Tensor, dtype, device) -> torch.Tensor:
    """bool [q, k] -> [1, 1, q, k] additive mask (0 where allowed, the dtype's minimum elsewhere)."""
    mask = torch.zeros(allowed.shape, dtype=dtype)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None].to(device)


class TargetCache:
    """The target's KV cache for one sequence, with the verify masks and the row cuts."""

    def __init__(self, model):
        from transformers import DynamicCache

        self.types, self.window = attention_layout(model.config)
        self.cache = DynamicCache()  # every layer a DynamicLayer: all rows kept (module docstring)
        self.argument = cache_argument(model)

    def tree_masks(self, prop: Proposal, n: int, dtype, device):
        """The verify forward's attention mask(s) for the tree `prop` after n cached tokens."""
        kinds = sorted(set(self.types))
        masks = {k: additive(allowed_rows(prop, n, self.window if k == SLIDING_ATTENTION else None), dtype, device)
                 for k in kinds}
        return masks[kinds[0]] if len(kinds) == 1 else masks

    def keep(self, n: int, keep: list[int], chain: bool) -> None:
        """Cut the cache to the context (n rows) plus the tree rows `keep` (offsets from n)."""
        cache = self.cache
        if chain:  # the accepted rows are a prefix; crop(-m) drops the last m rows in every transformers version
            drop = cache.get_seq_length() - (n + len(keep))
            if drop > 0:
                cache.crop(-drop)
            return
        rows = list(range(n)) + [n + k for k in keep]
        if hasattr(cache, "layers"):  # transformers >= 4.56: one object per layer
            for layer in cache.layers:
                if getattr(layer, "keys", None) is None or layer.keys.numel() == 0:
                    continue
                idx = torch.tensor(rows, device=layer.keys.device)
                layer.keys, layer.values = layer.keys.index_select(2, idx), layer.values.index_select(2, idx)
        else:  # earlier: lists of tensors
            for i, (k, v) in enumerate(zip(cache.key_cache, cache.value_cache)):
                idx = torch.tensor(rows, device=k.device)
                cache.key_cache[i], cache.value_cache[i] = k.index_select(2, idx), v.index_select(2, idx)
