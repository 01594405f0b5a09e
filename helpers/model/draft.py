"""The EAGLE-3 draft model in plain PyTorch: forward, k-step drafting, loading.

One Llama decoder layer over the target's hidden states (docs/eagle3-facts.md, 'Draft model'):

    aux [B,T,3Ht] --fc--> h [B,T,H]          (step 0 only; later steps reuse the layer's output)
    x = cat(input_layernorm(embed(next_ids)), hidden_norm(h))        # [B, T, 2H]
    h = residual + o_proj(attention(q/k/v over 2H inputs, RoPE))     # residual = h (or normed h)
    h = h + mlp(post_attention_layernorm(h))                         # SwiGLU
    logits = lm_head(norm(h))                                        # [B, T, draft_vocab]

Alignment: at position t the draft takes the aux hidden states of position t and the embedding
of token t+1 (a target-vocab id), and predicts token t+2. Step k >= 1 of `draft_steps` takes the
layer's own output as h and the embedding of the token drafted at step k-1 (mapped to a target
id through `d2t` under a reading, as the engines do), and predicts token t+2+k. Its query at
position t attends to the step-0 keys/values of positions <= t and to the keys/values of its own
chain's steps 1..k, with RoPE position t+k - the pattern SpecForge trains with.

The layer is Llama/Qwen3 attention or DeepSeek-V3 MLA (Kimi drafts), `helpers.model.layer`; `step`
is the one layer-plus-head pass that `draft_steps` here and `helpers.model.drafter.Drafter`
(speculate, with its KV cache) both run.

`load_draft` reads SGLang/SpecForge (`midlayer.*`, flat config), speculators (`layers.0.*`,
nested `transformer_layer_config`), NeMo Automodel and SGLang kimi_k25_eagle3 (MLA) checkpoints
straight onto the device in the target dtype; it takes a path or an open `Checkpoint`.
The config (`DraftConfig`, RoPE frequencies) lives in `helpers.model.config`, devices and dtypes in
`helpers.core.devices`; import them from there (this module uses them, it does not re-export them).
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers.core.devices import (
    available_bytes,
    default_dtype,
    resolve_device,
)
from helpers.core.errors import BadInputError
from helpers.core.terms import READINGS
from helpers.io.origin import Origin
from helpers.io.checkpoint import Checkpoint, open_checkpoint, stored_mapping
from helpers.io.configs import read_config
from helpers.io.mapping import VocabMapping, to_target_ids
from helpers.model.config import DraftConfig
from helpers.model.config_fields import check_draft_config
from helpers.model.keys import canonical_keys, check_keys, expected_shapes, shape_words
from helpers.model.layer import DecoderLayer, DraftKV, RMSNorm


# -- model ------------------------------------------------------------------------------------------
class Eagle3Draft(nn.Module):
    def __init__(self, cfg: DraftConfig):
        super().__init__()
        self.config = cfg
        H = cfg.hidden_size
        self.embed_tokens = nn.Embedding(cfg.vocab_size, H)
        Ht = cfg.target_hidden_size
        self.fc_norm = nn.ModuleList(RMSNorm(Ht, cfg.rms_norm_eps) for _ in range(3)) if cfg.fc_norm else None
        self.input_norm = RMSNorm(3 * Ht, cfg.rms_norm_eps) if cfg.norm_before_fc else None
        self.fc = nn.Linear(3 * Ht, H, bias=False)
        self.midlayer = DecoderLayer(cfg)
        self.norm = RMSNorm(H, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(H, cfg.draft_vocab_size, bias=False)
        self.mapping: VocabMapping | None = None
        self.d2t: torch.Tensor | None = None  # [draft_vocab] int64 on the model's device
        self.source: str | None = None
        self.checkpoint: Checkpoint | None = None  # what load_draft read it from (config, keys)
        self.embed_stored = True

    def set_mapping(self, mapping: VocabMapping | None) -> None:
        self.mapping = mapping
        self.d2t = None if mapping is None else mapping.d2t.to(self.lm_head.weight.device)

    def _check(self, aux_hidden, next_ids):
        Ht3 = 3 * self.config.target_hidden_size
        if aux_hidden.dim() != 3 or aux_hidden.shape[-1] != Ht3:
            raise ValueError(f"aux_hidden has shape {list(aux_hidden.shape)}, expected [B, T, {Ht3}]")
        if next_ids.shape != aux_hidden.shape[:2]:
            raise ValueError(f"next_ids has shape {list(next_ids.shape)}, expected {list(aux_hidden.shape[:2])}")

    def project(self, aux):
        """aux [B,T,3Ht] -> h [B,T,H]: fc, after fc_norm (per chunk) or input_norm (whole) if set."""
        if self.fc_norm is not None:
            aux = torch.cat([n(c) for n, c in zip(self.fc_norm, aux.chunk(3, dim=-1))], dim=-1)
        elif self.input_norm is not None:
            aux = self.input_norm(aux)
        return self.fc(aux)

    def step(self, h, emb, positions, kv: DraftKV, anchor=None):
        """One pass of the layer and the head -> (state fed to the next step, logits [B, m, draft_vocab]).

        h, emb [B, m, H]; RoPE `positions` [m]; `anchor` None for step 0 (the queries extend the
        cache `kv`), else each query's step-0 position (a drafting step; helpers.model.layer).
        """
        h = self.midlayer(h, emb, positions, kv, anchor)  # [B, m, H], pre-norm output
        normed = self.norm(h) if self.config.final_norm or self.config.feed_normed else h
        logits = self.lm_head(normed)
        return (normed if self.config.feed_normed else h), logits  # speculators / MLA norm_output: feed norm(h)

    def forward(self, aux_hidden, next_ids, attention_mask=None):
        """aux_hidden [B,T,3Ht], next_ids [B,T] (target id of token t+1) -> logits [B,T,draft_vocab]."""
        return self.draft_steps(aux_hidden, next_ids, steps=1, attention_mask=attention_mask)[0]

    def draft_steps(self, aux_hidden, next_ids, steps=1, reading="offset", attention_mask=None,
                    teacher_forcing=False):
        """k drafting steps for every position at once -> list of `steps` logits [B,T,draft_vocab].

        Step j at position t predicts token t+2+j. Step j >= 1 feeds back the argmax of step j-1
        mapped to a target id under `reading` ('offset'/'absolute'/'none'; 'none' also when the
        model has no d2t). With `teacher_forcing`, step j feeds the real token t+1+j instead
        (next_ids shifted left by j; how SpecForge trains), for training only.
        """
        if reading not in READINGS:
            raise ValueError(f"unknown reading {reading!r}; expected one of {READINGS}")
        self._check(aux_hidden, next_ids)
        B, T = next_ids.shape
        dt = self.fc.weight.dtype
        h = self.project(aux_hidden.to(dt))  # [B, T, H]
        ids = next_ids
        pos = torch.arange(T, device=h.device)
        kv = DraftKV(attention_mask)
        out = []
        for j in range(steps):
            h, logits = self.step(h, self.embed_tokens(ids), pos + j, kv, anchor=pos if j else None)
            out.append(logits)  # [B, T, draft_vocab]
            if j + 1 < steps:
                if teacher_forcing:
                    ids = F.pad(next_ids[:, j + 1:], (0, j + 1))
                else:
                    ids = to_target_ids(logits.argmax(-1), self.d2t, reading if self.d2t is not None else "none")
                    # a misread d2t can send a draft past the target vocab (e.g. absolute ids read
                    # as offsets); feed the last id there instead of failing: the chain is wrong anyway
                    ids = ids.clamp(0, self.config.vocab_size - 1)
        return out


def pick_tokens(logits: torch.Tensor, topk: int, sample: bool = False, temperature: float = 1.0, generator=None):
    """Per row of draft logits [r, V]: (draft ids [r, k], their log-probs [r, k], probs [r, V] or None).

    Greedy: the `topk` most probable ids. `sample`: one id drawn from softmax(logits / temperature)
    (speculative sampling), whose distribution is returned for the rejection rule.
    """
    if sample:
        probs = torch.softmax(logits.float() / temperature, dim=-1)
        ids = torch.multinomial(probs, 1, generator=generator)
        return ids, probs.gather(1, ids).clamp_min(1e-30).log(), probs
    lp, ids = torch.log_softmax(logits.float(), dim=-1).topk(topk, dim=-1)
    return ids, lp, None


# -- loading ----------------------------------------------------------------------------------------
def _open(path, draft_config=None) -> tuple[Checkpoint, DraftConfig, dict[str, str]]:
    """The checkpoint, its `DraftConfig` (from `draft_config` when given, else its config.json)
    and its weight keys by canonical name. `path` may be a `Checkpoint` already open."""
    ck = path if isinstance(path, Checkpoint) else open_checkpoint(path)
    if draft_config:
        where = Path(draft_config)
        cfg = DraftConfig.from_dict(check_draft_config(read_config(where), where), source=where)
        return ck, cfg, canonical_keys(ck)
    if ck.config is None:
        raise BadInputError(ck.origin or ck.path if isinstance(path, Checkpoint) else path,
                            "has no config.json next to the weights: the draft's shapes are needed; pass "
                            "--draft-config FILE (the draft config the trainer was given, e.g. SpecForge's "
                            "--draft-model-config)")
    # every field typed once (null is absent), the first wrong one named; then the draft's shape
    cfg = DraftConfig.from_dict(check_draft_config(ck.config, ck.config_path or ck.path), source=ck.config_path)
    return ck, cfg, canonical_keys(ck)


def _embed_source(embed_from) -> tuple[Checkpoint, str]:
    ck = embed_from if isinstance(embed_from, Checkpoint) else open_checkpoint(embed_from)
    for name in ("embed_tokens.weight", "model.embed_tokens.weight"):
        k = ck.tensors.find(name)
        if k is not None:
            return ck, k
    raise BadInputError(embed_from, "holds no embed_tokens.weight or model.embed_tokens.weight")


def estimate_load_bytes(path, dtype=None, embed_from=None, draft_config=None) -> int:
    """Bytes the loaded draft takes on the device in `dtype` (from tensor shapes, nothing read).

    `path` and `embed_from` may be `Checkpoint`s already open (nothing is opened again)."""
    ck, cfg, keys = _open(path, draft_config)
    embed = _embed_source(embed_from) if "embed_tokens.weight" not in keys and embed_from is not None else None
    return _load_bytes(ck, cfg, keys, embed, dtype or torch.float32)


def _load_bytes(ck: Checkpoint, cfg: DraftConfig, keys: dict[str, str], embed, dtype) -> int:
    n = sum(math.prod(ck.tensors.shape(k)) for k in keys.values()) * dtype.itemsize
    if "embed_tokens.weight" not in keys:
        if embed is not None:
            eck, ek = embed
            n += math.prod(eck.tensors.shape(ek)) * dtype.itemsize
        else:
            n += cfg.vocab_size * cfg.hidden_size * dtype.itemsize
    return n + cfg.draft_vocab_size * 8


class ShapeMismatch(BadInputError):
    """A stored tensor whose shape the draft's config contradicts (the config or the weights are wrong)."""


def _checked(ck: Checkpoint, cfg: DraftConfig, keys: dict[str, str], embed_from,
             need_embed: bool = True) -> tuple[dict[str, str], list[str], dict]:
    """What `load_draft` checks from the config and tensor headers alone (no weight is read): the
    head and fc present, every key modelled, every shape the config implies. Returns the keys to load,
    the names filled with ones and each tensor's (checkpoint, key). `need_embed=False`: a missing
    embed_tokens counts as supplied (`--embed-from`)."""
    wfile = ck.tensors.files[0] if ck.tensors.files else ck.path
    if cfg.tie_word_embeddings and "lm_head.weight" not in keys:
        raise BadInputError(wfile, "has no lm_head.weight and the config ties it to embed_tokens "
                            "(tie_word_embeddings): neither SpecForge nor speculators makes such a draft; "
                            "not supported")
    for name, what in (("fc.weight", "fc (the 3*H_target -> H projection)"), ("lm_head.weight", "lm_head")):
        if name not in keys:
            raise BadInputError(wfile, f"has no {what} weight: not a complete EAGLE-3 draft checkpoint")
    keys, ones = check_keys(ck, cfg, keys)
    sources = {k: (ck, v) for k, v in keys.items()}
    if "embed_tokens.weight" not in keys and (embed_from is not None or need_embed):
        if embed_from is None:
            raise BadInputError(
                wfile,
                "has no embed_tokens.weight: the draft borrows the target's embedding; pass "
                "embed_from=<target folder or file holding embed_tokens.weight> (CLI: --embed-from)",
            )
        sources["embed_tokens.weight"] = _embed_source(embed_from)
    expected = expected_shapes(cfg)
    for name, shape in expected.items():
        if name in ones or (name == "embed_tokens.weight" and name not in sources and not need_embed):
            continue
        if name not in sources:
            raise BadInputError(wfile, f"has no {name} (layout {ck.key_layout}): not a complete EAGLE-3 draft")
        src, k = sources[name]
        got = tuple(src.tensors.shape(k))
        if got != shape:
            raise ShapeMismatch(
                src.tensors.file_of(k), f"{k} has shape {list(got)} but the config implies {list(shape)}"
                + (f" ({words})" if (words := shape_words(name, cfg)) else ""))
    return keys, ones, sources


def loading_refusal(ck: Checkpoint) -> BadInputError | None:
    """What `load_draft` would refuse in this open checkpoint, judged from its config and tensor
    headers alone (the embedding counted as supplied), or None: the doctor's `config-invalid` reports
    it, so it never passes a draft that `evaluate` or `speculate` then refuses."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, cfg, keys = _open(ck)
            _checked(ck, cfg, keys, None, need_embed=False)
    except BadInputError as e:
        return e
    return None


def load_draft(path, device=None, dtype=None, embed_from=None, draft_config=None) -> Eagle3Draft:
    """Load an EAGLE-3 draft (SGLang/SpecForge, speculators, NeMo; Llama or MLA layer) onto `device`.

    `path` is a folder / file / URL, or a `Checkpoint` already open (`open_checkpoint`): its files
    are then not opened again; each weights file is read in one pass (`TensorStore.read_all`),
    and the loaded model keeps the `Checkpoint` as `.checkpoint` for whoever needs its config.
    Tensors are cast to `dtype` on `device`. `embed_from` names a
    folder/file holding the target's `embed_tokens.weight` when the draft has none;
    `draft_config` a config.json for a checkpoint that has none beside it (a SpecForge trainer
    step folder keeps only `training_state.pt`).
    """
    device = resolve_device(device)
    embed_from = embed_from or None  # "" (an empty notebook parameter or CLI value) means none
    dtype = dtype or default_dtype(device)
    ck, cfg, keys = _open(path, draft_config)
    keys, ones, sources = _checked(ck, cfg, keys, embed_from)
    need = _load_bytes(ck, cfg, keys, sources.get("embed_tokens.weight") if "embed_tokens.weight" not in keys
                       else None, dtype)
    free = available_bytes(device)
    if free is not None and need > free:
        raise BadInputError(
            ck.origin or ck.path, f"loading needs about {need / 2**30:.2f} GiB on {device} in {dtype} but only "
            f"{free / 2**30:.2f} GiB is free",
        )
    with torch.device("meta"):
        model = Eagle3Draft(cfg)
    mine = [k for src, k in sources.values() if src is ck]
    ck.tensors.read_all(mine + [k for k in (ck.tensors.find("d2t"), ck.tensors.find("t2d")) if k])
    try:
        state = {name: src.tensors.get(k, device, dtype) for name, (src, k) in sources.items()}
        state.update({name: torch.ones(expected_shapes(cfg)[name], device=device, dtype=dtype) for name in ones})
        model.load_state_dict(state, assign=True, strict=True)
        model.eval()
        mapping = stored_mapping(ck)
        if mapping is not None and mapping.draft_vocab_size != cfg.draft_vocab_size:
            raise BadInputError(
                mapping.sources[0] if mapping.sources else ck.path,
                f"d2t has {mapping.draft_vocab_size:,} entries but lm_head has {cfg.draft_vocab_size:,} rows",
            )
    finally:
        ck.tensors.release()
    model.set_mapping(mapping)
    model.checkpoint = ck
    model.embed_stored = "embed_tokens.weight" in keys  # False: borrowed from embed_from
    if isinstance(path, Checkpoint):
        model.source = ck.origin or os.fspath(ck.path)
    else:
        model.source = Origin(path).display_name
    return model
