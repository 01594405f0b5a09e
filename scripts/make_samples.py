"""Write the bundled EAGLE-3 samples under data_samples/ : a tiny target, its hidden states, a draft.

Deterministic (fixed seeds, one torch thread, deterministic algorithms): run it again and the
files come out byte-identical on the same machine. About 3-4 minutes on one CPU core.

1. Text: the docstrings of a fixed list of Python standard-library modules (`inspect.getdoc`, in
   sorted order): real English and code prose available offline.
2. Tokenizer: words (leading space kept, GPT-2 style) and single characters; the 4,096 - 4 most
   frequent pieces (Zipf-like counts; the script prints the rank-frequency slope), characters as
   fallback. Ids are shuffled with a fixed seed (specials stay at 0..3), so the kept draft ids are
   spread over the target vocab and `d2t` holds real, growing offsets.
3. Target: an 8-layer Llama-like model (H 64, tied embeddings) trained for 400 steps on "repeat
   units" of the text: a 24-token chunk, a blank line, the same chunk again (the repeated half
   weighted fully, the plain-text half at 0.2). A tiny model trained briefly on plain text only
   repeats its few likeliest tokens under greedy decoding (about 60 distinct tokens over all
   samples); one that has learnt to repeat continues a real prompt with varied real text, so the
   draft vocab is built from a Zipf-like token distribution, as it is for a real model.
   It is trained with its final RMSNorm weight fixed at 1; once saved, `fold_final_norm` gives
   that norm a non-trivial weight w (powers of two, 1/16..16, seeded) and folds 1/w into lm_head's
   columns, and multiplies the stored `hidden_state` by w (see step 4). The target computes the
   same logits (lm_head/w applied to w * rmsnorm(x)), bit for bit in bf16 since w is a power of
   two, so the draft, aux states and every accuracy figure stay the same - but a reader that
   applies `norm.weight` again to the stored (already normed) `hidden_state` now gets other
   argmaxes, as with a real target. lm_head is then no longer the embedding: the saved config
   says `tie_word_embeddings: false`.
4. Samples: prompt = a 24-token chunk + blank line, continued greedily by the target to 50
   tokens (the target's argmax at t+1 is token t+2 on every generated position). Aux hidden
   states: inputs of target layers 2, 4, 5 (SpecForge's default 2, L//2, L-3 for L = 8), i.e.
   configured ids [1, 3, 4], which SGLang shifts by +1. loss_mask is 1 on generated tokens.
   Stored as bf16 in SpecForge's offline layout: train as `.ckpt`, val as `.ckpt.gz`; val prompts
   come from docstrings (every sixth) that no train prompt comes from.
5. Draft vocab: the 800 most frequent target ids among train loss_mask tokens
   (`helpers.io.mapping.build_from_frequencies`), about a fifth of the target vocab (Kimi's ratio).
6. Draft: `helpers.model.draft.Eagle3Draft` (H 64, 4 heads / 2 kv heads) trained with the model's own
   `draft_steps` (3-step training-time test, teacher-forced tokens, SpecForge's soft targets
   over the draft vocab and its position mask), saved in four layouts (bf16), and scored by
   loading the saved SGLang-style copy with `helpers.model.draft.load_draft`.

Usage: .venv/bin/python -m scripts.make_samples [--out data_samples]
"""
from __future__ import annotations

import argparse
import collections
import gzip
import importlib
import inspect
import json
import math
import os
import re
import shutil
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file
from tqdm.auto import tqdm

from helpers.model.layer import MLP, RMSNorm, rotate_half
from helpers.model.draft import Eagle3Draft, load_draft
from helpers.model.config import DraftConfig, rope_inv_freq
from helpers.io.checkpoint import open_checkpoint
from helpers.io.mapping import build_from_frequencies, to_target_ids
from helpers.io.samples import iter_samples

SEED = 1234
THREADS = 1  # one thread: deterministic, and 2 OpenMP threads crawl on a shared 2-core box
VOCAB, DRAFT_VOCAB = 4096, 800
SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]
H, LAYERS, HEADS, INTER = 64, 8, 4, 192
AUX_INPUTS = [2, LAYERS // 2, LAYERS - 3]  # capture the INPUT of these target layers
AUX_CONFIG_IDS = [i - 1 for i in AUX_INPUTS]  # what a config states (SGLang adds 1)
PROMPT, GEN = 24, 24  # prompt chunk tokens; tokens the target generates after the blank line
N_TRAIN, N_VAL, N_HELD = 320, 64, 32
D_HEADS, D_KV, D_INTER = 4, 2, 256
MODULES = sorted("""abc argparse ast asyncio base64 bisect calendar cmd codecs collections
concurrent.futures configparser contextlib copy csv dataclasses datetime decimal difflib email enum
fileinput fnmatch fractions ftplib functools getopt gettext glob gzip hashlib heapq hmac html
http.client http.server imaplib inspect io ipaddress itertools json logging mailbox mimetypes
multiprocessing numbers operator optparse os pathlib pickle pkgutil platform plistlib poplib pprint
queue random re sched secrets selectors shelve shlex shutil signal smtplib socket socketserver
sqlite3 ssl statistics string struct subprocess tarfile tempfile textwrap threading timeit tokenize
traceback types typing unittest urllib.parse urllib.request uuid warnings weakref xml.dom.minidom
xml.etree.ElementTree zipfile zoneinfo""".split())
ROOT = Path(__file__).resolve().parents[1]
PIECE = re.compile(r" ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]|\n| +")


# -- text and tokenizer -------------------------------------------------------------------------------
def stdlib_docstrings() -> list[str]:
    docs: list[str] = []
    seen: set[str] = set()

    def add(obj):
        d = inspect.getdoc(obj)
        if d and d not in seen:
            seen.add(d)
            docs.append(d)

    for name in MODULES:
        mod = importlib.import_module(name)
        add(mod)
        for attr in sorted(vars(mod)):
            obj = vars(mod)[attr]
            if attr.startswith("_") or getattr(obj, "__module__", None) != mod.__name__:
                continue
            add(obj)
            if inspect.isclass(obj):
                for m in sorted(vars(obj)):
                    if not m.startswith("_"):
                        v = vars(obj)[m]
                        add(v.__func__ if isinstance(v, (staticmethod, classmethod)) else v)
    return docs


CHAT_TEMPLATE = (  # one turn after another; a user (or system) turn ends with a blank line, as the target learnt
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}{% generation %}{{ message['content'] }}{% endgeneration %}"
    "{%- else -%}{{ message['content'] }}{{ '\\n\\n' }}{%- endif -%}"
    "{%- endfor -%}"
)


def build_tokenizer(docs: list[str], size: int, seed: int):
    """Word pieces (leading space kept) + single characters, ids shuffled with a fixed seed, as a
    `tokenizers` tokenizer that AutoTokenizer loads: the text is split by PIECE, each piece is
    looked up whole, else greedily by its longest known prefix (WordPiece with no prefix marker)."""
    from tokenizers import Regex, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as RustTokenizer
    from transformers import PreTrainedTokenizerFast

    counts = collections.Counter(p for d in docs for p in PIECE.findall(d))
    chars = collections.Counter(ch for d in docs for ch in d)
    base = sorted(ch for ch, c in chars.items() if c >= 5)
    words = [w for w, _ in sorted(counts.items(), key=lambda wc: (-wc[1], wc[0])) if len(w) > 1]
    pieces = base + words[: size - len(SPECIALS) - len(base)]
    order = np.random.default_rng(seed).permutation(len(pieces))
    tokens = SPECIALS + [pieces[i] for i in order]
    rust = RustTokenizer(models.WordPiece({t: i for i, t in enumerate(tokens)}, unk_token="<unk>",
                                          continuing_subword_prefix="", max_input_chars_per_word=1000))
    rust.pre_tokenizer = pre_tokenizers.Split(Regex(PIECE.pattern), behavior="isolated")
    rust.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=rust, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>",
                                  unk_token="<unk>", model_max_length=512)
    tok.chat_template = CHAT_TEMPLATE
    return tok


def encode(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


# -- the tiny target ----------------------------------------------------------------------------------
def target_config() -> DraftConfig:
    return DraftConfig(hidden_size=H, num_attention_heads=HEADS, num_key_value_heads=HEADS, intermediate_size=INTER,
                       draft_vocab_size=VOCAB, vocab_size=VOCAB, target_hidden_size=H, head_dim=H // HEADS)


class Block(nn.Module):
    def __init__(self, cfg: DraftConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(H, cfg.rms_norm_eps)
        self.qkv = nn.Linear(H, 3 * H, bias=False)
        self.o_proj = nn.Linear(H, H, bias=False)
        self.post_attention_layernorm = RMSNorm(H, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, cache=None):
        """x [B,T,H]; with `cache` (a list, filled on the first call) x holds only new positions."""
        B, T, _ = x.shape
        q, k, v = self.qkv(self.input_layernorm(x)).view(B, T, 3, HEADS, H // HEADS).permute(2, 0, 3, 1, 4)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        if cache:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        if cache is not None:
            cache[:] = [k, v]
        a = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1).transpose(1, 2).reshape(B, T, H)
        x = x + self.o_proj(a)
        return x + self.mlp(self.post_attention_layernorm(x))


class TinyTarget(nn.Module):
    def __init__(self):
        super().__init__()
        self.cfg = target_config()
        self.embed_tokens = nn.Embedding(VOCAB, H)
        self.layers = nn.ModuleList(Block(self.cfg) for _ in range(LAYERS))
        self.norm = RMSNorm(H, self.cfg.rms_norm_eps)
        self.norm.weight.requires_grad_(False)  # fixed at 1: see the module docstring
        self.lm_head = nn.Linear(H, VOCAB, bias=False)
        nn.init.normal_(self.embed_tokens.weight, std=H**-0.5)  # unit-norm rows: rare tokens stay distinct
        self.lm_head.weight = self.embed_tokens.weight  # tied, as in small Llamas (3.2 1B/3B)

    def forward(self, ids, caches=None, start=0):
        """ids [B,T] -> (logits [B,T,V], final normed hidden [B,T,H], aux [B,T,3H]).

        With `caches` (one list per layer) only the new positions start.. are passed in."""
        T = ids.shape[1]
        ang = torch.arange(start, start + T).float()[:, None] * rope_inv_freq(self.cfg)[None]
        cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
        x, aux = self.embed_tokens(ids), []
        for i, layer in enumerate(self.layers):
            if i in AUX_INPUTS:
                aux.append(x)
            x = layer(x, cos, sin, None if caches is None else caches[i])
        h = self.norm(x)
        return self.lm_head(h), h, torch.cat(aux, dim=-1)


def train_target(units: torch.Tensor, steps: int, batch: int = 16, lr: float = 3e-3) -> TinyTarget:
    model = TinyTarget()
    return fit_target(model, lambda x: model(x)[0], units, steps, batch, lr, "target")


def fit_target(model: torch.nn.Module, logits_of, units: torch.Tensor, steps: int, batch: int, lr: float,
               label: str, seed: int = SEED) -> torch.nn.Module:
    """Train `model` (`logits_of(ids)` -> [batch, T, VOCAB]) on pairs of repeat units, batches drawn
    with `seed`; the Llama and the Kimi-shaped targets are both trained by this loop."""
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.01)
    g = torch.Generator().manual_seed(seed)
    n = PROMPT + 2
    # predicting the repeated half counts fully, the first (plain text) half at 0.2
    unit_w = torch.tensor([0.2] * (n - 1) + [1.0] * n + [0.2])  # targets x[1:] of one unit
    weight = torch.cat([unit_w, unit_w])[None]  # [1, 2 units - 1]
    weight = weight[:, : 2 * units.shape[1] - 1]
    model.train()
    bar = tqdm(range(steps), desc=label, mininterval=5)
    for step in bar:
        for pg in opt.param_groups:
            pg["lr"] = lr * min(1.0, (step + 1) / 30) * 0.5 * (1 + math.cos(math.pi * step / steps))
        rows = torch.randint(0, units.shape[0] - 1, (batch,), generator=g)
        x = torch.cat([units[rows], units[rows + 1]], dim=1)  # [batch, 2 units]
        logits = logits_of(x[:, :-1])
        ce = F.cross_entropy(logits.reshape(-1, VOCAB), x[:, 1:].reshape(-1), reduction="none").view(batch, -1)
        loss = (ce * weight).sum() / (weight.sum() * batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        bar.set_postfix(loss=f"{loss.item():.3f}")
    print(f"{label}: final train loss {loss.item():.3f} after {steps} steps")
    return model.eval()


def to_hf_state(target: TinyTarget) -> dict[str, torch.Tensor]:
    """TinyTarget -> a transformers LlamaForCausalLM state dict (bf16), the final norm folded.

    The model is trained with its final RMSNorm weight fixed at 1. Here the norm gets a
    non-trivial weight w (powers of two, seeded) and lm_head's columns are divided by w: the
    target computes the same logits (lm_head/w applied to w * rmsnorm(x), exact since w is a power
    of two), but its stored `hidden_state` (after the norm) is w * rmsnorm(x), so a reader that
    applies `norm.weight` again gets other argmaxes, as with a real target. lm_head is then no
    longer the embedding (`tie_word_embeddings: false`).
    """
    sd = {k: v.detach().float() for k, v in target.state_dict().items()}
    w = final_norm_weight().float()
    out = {"model.embed_tokens.weight": sd["embed_tokens.weight"], "model.norm.weight": w,
           "lm_head.weight": sd["lm_head.weight"] / w}
    for i in range(LAYERS):
        p, q = f"layers.{i}.", f"model.layers.{i}."
        qkv = sd[p + "qkv.weight"]
        out |= {q + "self_attn.q_proj.weight": qkv[:H], q + "self_attn.k_proj.weight": qkv[H : 2 * H],
                q + "self_attn.v_proj.weight": qkv[2 * H :], q + "self_attn.o_proj.weight": sd[p + "o_proj.weight"],
                q + "input_layernorm.weight": sd[p + "input_layernorm.weight"],
                q + "post_attention_layernorm.weight": sd[p + "post_attention_layernorm.weight"]}
        for m in ("gate_proj", "up_proj", "down_proj"):
            out[q + f"mlp.{m}.weight"] = sd[p + f"mlp.{m}.weight"]
    return {k: v.to(torch.bfloat16).contiguous() for k, v in out.items()}


def save_target(out: Path, target: TinyTarget, tok) -> Path:
    """The tiny target as a complete Hugging Face model folder: weights, config, tokenizer."""
    folder = out / "tiny_target"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H, "intermediate_size": INTER,
        "num_attention_heads": HEADS, "num_key_value_heads": HEADS, "head_dim": H // HEADS,
        "num_hidden_layers": LAYERS, "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "max_position_embeddings": 512, "vocab_size": VOCAB, "tie_word_embeddings": False,
        "attention_bias": False, "mlp_bias": False, "torch_dtype": "bfloat16",
        "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
    }
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    save_file(to_hf_state(target), str(folder / "model.safetensors"), metadata={"format": "pt"})
    tok.save_pretrained(folder)
    (folder / "vocab.json").write_text(json.dumps(tok.convert_ids_to_tokens(list(range(VOCAB))), ensure_ascii=False) + "\n")
    return folder


@torch.no_grad()
def check_conversion(target: TinyTarget, folder: Path, ids: torch.Tensor) -> float:
    """The saved HF model computes what TinyTarget (with bf16-rounded weights) computes."""
    from helpers.model.target import load_target

    ref = TinyTarget()
    sd = {k: v.to(torch.bfloat16).float() for k, v in target.state_dict().items()}
    ref.load_state_dict(sd)
    want = ref(ids)[0]
    got = load_target(folder, device="cpu", dtype=torch.float32, tokenizer=False).model(ids).logits
    diff = float((want - got).abs().max())
    agree = float((want.argmax(-1) == got.argmax(-1)).float().mean())
    if diff > 1e-3 or agree < 0.999:
        raise SystemExit(f"{folder}: the saved Hugging Face target differs from the trained one (max |diff| {diff:.2g})")
    return diff


def write_prompts(path: Path, texts: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"prompt": t}, ensure_ascii=False) + "\n" for t in texts))


def capture_split(target_dir: Path, prompts: Path, dest: Path, gz: bool) -> None:
    """Capture one split with the kit's own `capture` (what `d2t-lab capture ... --regenerate` does)."""
    from helpers.model.capture import CaptureSettings, capture
    from helpers.model.target import load_target

    if dest.exists():
        shutil.rmtree(dest)
    tgt = load_target(target_dir, device="cpu", dtype=torch.float32)
    capture(tgt, prompts, dest, CaptureSettings(engine="sglang", aux_layers=AUX_CONFIG_IDS, regenerate=True,
                                                max_new_tokens=GEN), progress=True)
    if gz:
        for f in sorted(dest.rglob("data_*.ckpt")):
            f.with_name(f.name + ".gz").write_bytes(gzip.compress(f.read_bytes(), compresslevel=9, mtime=0))
            f.unlink()


def stack_samples(folder: Path) -> dict[str, torch.Tensor]:
    """A split's samples as right-padded tensors (padding: id 0, loss_mask 0, zero states)."""
    ss = list(iter_samples(folder))
    T = max(s.length for s in ss)
    out = {"input_ids": torch.zeros(len(ss), T, dtype=torch.int64), "loss_mask": torch.zeros(len(ss), T, dtype=torch.int64),
           "hidden_state": torch.zeros(len(ss), T, H), "aux_hidden_state": torch.zeros(len(ss), T, 3 * H)}
    for r, s in enumerate(ss):
        n = s.length
        out["input_ids"][r, :n], out["loss_mask"][r, :n] = s.input_ids, s.loss_mask
        out["hidden_state"][r, :n], out["aux_hidden_state"][r, :n] = s.hidden_state.float(), s.aux_hidden_state.float()
    return out


# -- the draft ----------------------------------------------------------------------------------------
def draft_config_dict() -> dict:
    return {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": H,
        "intermediate_size": D_INTER, "num_attention_heads": D_HEADS, "num_key_value_heads": D_KV,
        "head_dim": H // D_HEADS, "num_hidden_layers": 1, "hidden_act": "silu", "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0, "rope_scaling": None, "max_position_embeddings": 512,
        "vocab_size": VOCAB, "draft_vocab_size": DRAFT_VOCAB, "target_hidden_size": H,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": AUX_CONFIG_IDS, "use_aux_hidden_state": True},
    }


def train_draft(target: TinyTarget, head: torch.Tensor, train: dict, kept: torch.Tensor, epochs: int,
                steps: int = 3) -> Eagle3Draft:
    """`head`: the saved target's lm_head [V, H] (folded: it applies to the stored hidden_state)."""
    torch.manual_seed(SEED + 1)
    draft = Eagle3Draft(DraftConfig.from_dict(draft_config_dict()))
    with torch.no_grad():
        draft.embed_tokens.weight.copy_(target.embed_tokens.weight)  # borrowed from the target, frozen
        draft.lm_head.weight.copy_(target.lm_head.weight[kept])  # warm start on the kept rows
    draft.embed_tokens.weight.requires_grad_(False)
    return fit_draft(draft, train, head, kept, epochs, steps, seed=SEED + 2, desc="draft")


def fit_draft(draft: Eagle3Draft, train: dict, head: torch.Tensor, kept: torch.Tensor, epochs: int, steps: int,
              seed: int, desc: str) -> Eagle3Draft:
    """Train `draft` (its frozen embedding and warm-started head already set) on the stacked
    samples `train` with soft targets from the target head `head` [V, H] over the kept ids, the
    loss SpecForge trains with (its position mask, 0.8^j per drafting step), cosine learning rate."""
    ids, mask = train["input_ids"], train["loss_mask"]
    aux = train["aux_hidden_state"].float()[:, :-1]  # [N, T-1, 3H]
    with torch.no_grad():  # target logits from the stored (bf16) last hidden state, as SpecForge does
        tlogits = train["hidden_state"].float() @ head.float().T  # [N, T, V]
    in_draft = torch.zeros(VOCAB, dtype=torch.bool)
    in_draft[kept] = True
    opt = torch.optim.AdamW([p for p in draft.parameters() if p.requires_grad], lr=3e-3, weight_decay=0.0)
    g = torch.Generator().manual_seed(seed)
    N, T = ids.shape
    batch = 16
    total = epochs * math.ceil(N / batch)
    bar = tqdm(total=total, desc=desc, mininterval=5)
    it = 0
    for _ in range(epochs):
        for b in torch.randperm(N, generator=g).split(batch):
            for pg in opt.param_groups:
                pg["lr"] = 3e-3 * 0.5 * (1 + math.cos(math.pi * it / total))
            outs = draft.draft_steps(aux[b], ids[b, 1:], steps=steps, teacher_forcing=True)
            loss = 0.0
            for j, logits in enumerate(outs):  # step j at position t predicts token t+2+j
                L = T - 2 - j  # positions whose label position t+1+j exists
                tl = tlogits[b, 1 + j : 1 + j + L]  # [b, L, V]
                pos = (mask[b, j : j + L] == 1) & in_draft[tl.argmax(-1)]  # SpecForge's position mask
                p = torch.softmax(tl[..., kept], dim=-1)  # soft target over the draft vocab
                ce = -(p * torch.log_softmax(logits[:, :L], dim=-1)).sum(-1)
                loss = loss + 0.8**j * (ce * pos).sum() / pos.sum().clamp(min=1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            it += 1
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.3f}")
    bar.close()
    return draft.eval()


def state_dict_bf16(draft: Eagle3Draft, layer_prefix: str, with_embed: bool) -> dict[str, torch.Tensor]:
    out = {}
    for k, v in draft.state_dict().items():
        if k.startswith("embed_tokens") and not with_embed:
            continue
        out[k.replace("midlayer.", layer_prefix, 1)] = v.detach().to(torch.bfloat16).contiguous()
    return out


def save_drafts(out: Path, draft: Eagle3Draft, mapping) -> None:
    cfg = draft_config_dict()
    d2t, t2d = mapping.d2t.clone(), mapping.t2d.clone()
    absolute = d2t + torch.arange(d2t.numel())
    variants = {
        "tiny_draft_sglang": {"d2t": d2t, "t2d": t2d},
        "tiny_draft_absolute": {"d2t": absolute, "t2d": t2d},
        "tiny_draft_no_d2t": {},
    }
    for name, extra in variants.items():
        folder = out / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
        save_file({**state_dict_bf16(draft, "midlayer.", True), **extra}, str(folder / "model.safetensors"),
                  metadata={"format": "pt"})
    write_speculators_draft(out / "tiny_draft_speculators", cfg, state_dict_bf16(draft, "layers.0.", False), d2t, t2d)


def speculators_config(cfg: dict) -> dict:
    """`cfg` (the flat draft config) as speculators 0.9.0 saves an Eagle3 draft's config.json (the fields and
    nesting of data_samples/producers/speculators_control, which the real library wrote): the layer config nested
    under transformer_layer_config, the algorithm and verifier under speculators_config."""
    layer = {k: v for k, v in cfg.items() if k not in ("architectures", "draft_vocab_size", "target_hidden_size",
                                                       "eagle_config", "torch_dtype")}
    layer["architectures"] = ["LlamaForCausalLM"]
    return {
        "architectures": ["Eagle3DraftModel"], "auto_map": {"": "config.Eagle3SpeculatorConfig"},
        "draft_vocab_size": DRAFT_VOCAB, "dtype": "bfloat16", "eagle_aux_hidden_state_layer_ids": AUX_CONFIG_IDS,
        "embed_requires_grad": False, "fc_norm": False, "norm_before_fc": False, "norm_before_residual": False,
        "norm_output": False,
        "speculators_config": {
            "algorithm": "eagle3", "default_proposal_method": "greedy",
            "proposal_methods": [{"accept_tolerance": 0.0, "proposal_type": "greedy", "speculative_tokens": 3,
                                  "verifier_accept_k": 1}],
            "verifier": {"architectures": ["LlamaForCausalLM"], "name_or_path": "data_samples/tiny_target"}},
        "speculators_model_type": "eagle3", "speculators_version": "0.9.0", "target_hidden_size": H,
        "tie_word_embeddings": False, "transformer_layer_config": layer,
    }


def write_speculators_draft(folder: Path, cfg: dict, tensors: dict, d2t, t2d) -> None:
    """The speculators-layout sample as speculators 0.9.0 writes it: layers.0.* names, no embed_tokens (the
    verifier's is used), d2t and t2d inside model.safetensors."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(speculators_config(cfg), indent=2) + "\n")
    save_file({**tensors, "d2t": d2t, "t2d": t2d}, str(folder / "model.safetensors"), metadata={"format": "pt"})
    for side in ("d2t.npy", "t2d.npy"):  # the older sample kept the mapping beside the weights
        (folder / side).unlink(missing_ok=True)


NORM_SEED = 20240607  # the seed of the folded final-norm weight (independent of everything else)


def final_norm_weight() -> torch.Tensor:
    """The tiny target's final-norm weight w [H]: powers of two 2^k, k in -4..4, seeded (bf16-exact)."""
    g = torch.Generator().manual_seed(NORM_SEED)
    return (2.0 ** torch.randint(-4, 5, (H,), generator=g).float()).to(torch.bfloat16)


# -- scoring (the kit's evaluate module does this in full; this is the script's own check) ----------
@torch.no_grad()
def quick_accuracy(draft_dir: Path, samples: Path, target_dir: Path) -> dict[str, float]:
    """Step-0 top-1 with the offset reading on loss_mask positions t: label token t+2, and the
    target's own argmax at t+1 (lm_head of tiny_target over the stored hidden state)."""
    model = load_draft(draft_dir, device="cpu", dtype=torch.float32)
    head = open_checkpoint(target_dir).tensors.get("lm_head.weight", "cpu", torch.float32)
    hits = hits_arg = n = 0
    for s in iter_samples(samples, expect_aux_width=3 * model.config.target_hidden_size):
        T = s.length
        logits = model(s.aux_hidden_state[None, : T - 2].float(), s.input_ids[None, 1 : T - 1])[0]  # [T-2, Vd]
        pred = to_target_ids(logits.argmax(-1), model.d2t, "offset")
        label = s.input_ids[2:]
        arg = (s.hidden_state[1 : T - 1].float() @ head.T).argmax(-1)
        m = s.loss_mask[: T - 2] == 1
        hits += int(((pred == label) & m).sum())
        hits_arg += int(((pred == arg) & m).sum())
        n += int(m.sum())
    return {"top1_token": hits / n, "top1_target_argmax": hits_arg / n, "tokens": n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "data_samples"))
    ap.add_argument("--target-steps", type=int, default=400)
    ap.add_argument("--draft-epochs", type=int, default=20)
    args = ap.parse_args()
    out = Path(args.out).resolve()
    os.chdir(ROOT)  # the manifests name their inputs relative to the repository root
    t0 = time.time()
    torch.manual_seed(SEED)
    torch.set_num_threads(THREADS)
    torch.use_deterministic_algorithms(True)

    docs = stdlib_docstrings()
    tok = build_tokenizer(docs, VOCAB, SEED)
    encoded = [encode(tok, d) for d in docs]
    sep = encode(tok, "\n\n")
    stream = torch.tensor([i for e in encoded for i in e + sep], dtype=torch.int64)
    counts = np.bincount(stream.numpy(), minlength=VOCAB)
    top = np.sort(counts)[::-1][:1000].astype(float)
    slope = np.polyfit(np.log(np.arange(1, 1001)), np.log(np.maximum(top, 1)), 1)[0]
    print(f"text: {len(docs)} docstrings, {stream.numel():,} tokens; rank-frequency slope {slope:.2f} (Zipf ~ -1)")

    # The target is trained on "repeat" units, a chunk of real text, a blank line, the chunk
    # again: a tiny model trained briefly on plain text only repeats its few likeliest tokens
    # under greedy decoding, while one that has learnt to repeat continues a real prompt with
    # varied, Zipf-distributed real tokens - which is what a draft vocab needs to be built from.
    chunks = [(d, e[s : s + PROMPT]) for d, e in enumerate(encoded) for s in range(0, len(e) - PROMPT + 1, PROMPT)]
    units = torch.tensor([c + sep + c + sep for _, c in chunks], dtype=torch.int64)  # [n_chunks, 2*(PROMPT+2)]
    print(f"target trains on {len(chunks):,} repeat units of {units.shape[1]} tokens")
    target = train_target(units, args.target_steps)
    target_dir = save_target(out, target, tok)
    diff = check_conversion(target, target_dir, units[:8])
    print(f"saved {target_dir} as a Hugging Face Llama (logits within {diff:.1e} of the trained model)")

    # prompts: text of 24-token chunks; val and held-out prompts come from docstrings (every
    # sixth) that no train prompt comes from
    val_docs = {d for d in range(len(encoded)) if d % 6 == 0}
    tr = [tok.decode(c) for d, c in chunks if d not in val_docs]
    va = [tok.decode(c) for d, c in chunks if d in val_docs]
    g = torch.Generator().manual_seed(SEED + 4)
    tr = [tr[i] for i in torch.randperm(len(tr), generator=g)[:N_TRAIN].tolist()]
    perm = torch.randperm(len(va), generator=g).tolist()
    held = [va[i] for i in perm[N_VAL : N_VAL + N_HELD]]
    va = [va[i] for i in perm[:N_VAL]]
    prompts = {"train": out / "prompts" / "train.jsonl", "val": out / "prompts" / "val.jsonl"}
    write_prompts(prompts["train"], tr)
    write_prompts(prompts["val"], va)
    write_prompts(out / "prompts.jsonl", held)
    print(f"prompts: {len(tr)} train, {len(va)} val, {len(held)} held out (prompts.jsonl)")

    hs = out / "tiny_hidden_states"
    for split in ("train", "val"):  # the target answers each prompt greedily; its states are captured
        capture_split(Path(os.path.relpath(target_dir)), Path(os.path.relpath(prompts[split])), hs / split,
                      gz=split == "val")
    train, val = stack_samples(hs / "train"), stack_samples(hs / "val")
    gen_ids = train["input_ids"][train["loss_mask"] == 1]
    print(f"captured {len(train['input_ids'])} + {len(val['input_ids'])} samples; {len(torch.unique(gen_ids))} "
          f"distinct generated tokens")
    row = train["input_ids"][0][: int(train["loss_mask"][0].sum() + (train["loss_mask"][0] == 0).sum())]
    print("  ", repr(tok.decode(row.tolist())))

    freqs = torch.bincount(gen_ids, minlength=VOCAB)
    mapping = build_from_frequencies(freqs, DRAFT_VOCAB, VOCAB)
    kept = mapping.targets("offset")
    cover = float(torch.isin(val["input_ids"][val["loss_mask"] == 1], kept).float().mean())
    print(f"draft vocab {DRAFT_VOCAB} of {VOCAB}; val coverage {cover:.1%}; leading zeros {mapping.leading_zero_run}")

    head = open_checkpoint(target_dir).tensors.get("lm_head.weight", "cpu", torch.float32)
    draft = train_draft(target, head, train, kept, args.draft_epochs)
    save_drafts(out, draft, mapping)
    for split in ("train", "val"):
        acc = quick_accuracy(out / "tiny_draft_sglang", hs / split, target_dir)
        print(f"{split}: top-1 (offset reading) {acc['top1_token']:.2%} vs token t+2, "
              f"{acc['top1_target_argmax']:.2%} vs target argmax, {acc['tokens']} tokens")
    print(f"done in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
