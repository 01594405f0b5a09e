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
   (`helpers.mapping.build_from_frequencies`), about a fifth of the target vocab (Kimi's ratio).
6. Draft: `helpers.draft.Eagle3Draft` (H 64, 4 heads / 2 kv heads) trained with the model's own
   `draft_steps` (3-step training-time test, teacher-forced tokens, SpecForge's soft targets
   over the draft vocab and its position mask), saved in four layouts (bf16), and scored by
   loading the saved SGLang-style copy with `helpers.draft.load_draft`.

Usage: .venv/bin/python scripts/make_samples.py [--out data_samples]
"""
from __future__ import annotations

import argparse
import collections
import gzip
import importlib
import inspect
import io
import json
import math
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

from helpers.draft import MLP, Eagle3Draft, RMSNorm, load_draft, rotate_half
from helpers.draft_config import DraftConfig, rope_inv_freq
from helpers.mapping import build_from_frequencies, to_target_ids
from helpers.samples import iter_samples

SEED = 1234
THREADS = 1  # one thread: deterministic, and 2 OpenMP threads crawl on a shared 2-core box
VOCAB, DRAFT_VOCAB = 4096, 800
SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]
H, LAYERS, HEADS, INTER = 64, 8, 4, 192
AUX_INPUTS = [2, LAYERS // 2, LAYERS - 3]  # capture the INPUT of these target layers
AUX_CONFIG_IDS = [i - 1 for i in AUX_INPUTS]  # what a config states (SGLang adds 1)
PROMPT, SEQ = 24, 50  # SEQ = prompt + blank line (2) + 24 generated
N_TRAIN, N_VAL = 320, 64
D_HEADS, D_KV, D_INTER = 4, 2, 256
ROWS = 64  # samples per rows_* folder
MODULES = sorted("""abc argparse ast asyncio base64 bisect calendar cmd codecs collections
concurrent.futures configparser contextlib copy csv dataclasses datetime decimal difflib email enum
fileinput fnmatch fractions ftplib functools getopt gettext glob gzip hashlib heapq hmac html
http.client http.server imaplib inspect io ipaddress itertools json logging mailbox mimetypes
multiprocessing numbers operator optparse os pathlib pickle pkgutil platform plistlib poplib pprint
queue random re sched secrets selectors shelve shlex shutil signal smtplib socket socketserver
sqlite3 ssl statistics string struct subprocess tarfile tempfile textwrap threading timeit tokenize
traceback types typing unittest urllib.parse urllib.request uuid warnings weakref xml.dom.minidom
xml.etree.ElementTree zipfile zoneinfo""".split())
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


class Tokenizer:
    """Word pieces (leading space kept) + single characters; ids shuffled with a fixed seed."""

    def __init__(self, docs: list[str], size: int, seed: int):
        counts = collections.Counter(p for d in docs for p in PIECE.findall(d))
        chars = collections.Counter(ch for d in docs for ch in d)
        base = sorted(ch for ch, c in chars.items() if c >= 5)
        words = [w for w, _ in sorted(counts.items(), key=lambda wc: (-wc[1], wc[0])) if len(w) > 1]
        pieces = base + words[: size - len(SPECIALS) - len(base)]
        order = np.random.default_rng(seed).permutation(len(pieces))
        self.tokens = SPECIALS + [pieces[i] for i in order]
        self.ids = {t: i for i, t in enumerate(self.tokens)}

    def encode(self, text: str) -> list[int]:
        out = []
        for p in PIECE.findall(text):
            if p in self.ids:
                out.append(self.ids[p])
            else:
                out.extend(self.ids.get(ch, 3) for ch in p)
        return out

    def decode(self, ids) -> str:
        return "".join(self.tokens[i] for i in ids)


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
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.01)
    g = torch.Generator().manual_seed(SEED)
    n = PROMPT + 2
    # predicting the repeated half counts fully, the first (plain text) half at 0.2
    unit_w = torch.tensor([0.2] * (n - 1) + [1.0] * n + [0.2])  # targets x[1:] of one unit
    weight = torch.cat([unit_w, unit_w])[None]  # [1, 2 units - 1]
    weight = weight[:, : 2 * units.shape[1] - 1]
    bar = tqdm(range(steps), desc="target", mininterval=5)
    for step in bar:
        for pg in opt.param_groups:
            pg["lr"] = lr * min(1.0, (step + 1) / 30) * 0.5 * (1 + math.cos(math.pi * step / steps))
        rows = torch.randint(0, units.shape[0] - 1, (batch,), generator=g)
        x = torch.cat([units[rows], units[rows + 1]], dim=1)  # [batch, 2 units]
        logits, _, _ = model(x[:, :-1])
        ce = F.cross_entropy(logits.reshape(-1, VOCAB), x[:, 1:].reshape(-1), reduction="none").view(batch, -1)
        loss = (ce * weight).sum() / (weight.sum() * batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        bar.set_postfix(loss=f"{loss.item():.3f}")
    print(f"target: final train loss {loss.item():.3f} after {steps} steps")
    return model.eval()


@torch.no_grad()
def generate(model: TinyTarget, prompts: torch.Tensor) -> dict[str, torch.Tensor]:
    """Greedy continuation of prompts [N, PROMPT] to SEQ tokens, then one pass for hidden states."""
    caches = [[] for _ in range(LAYERS)]
    logits, _, _ = model(prompts, caches)
    ids = [prompts, logits[:, -1:].argmax(-1)]
    for pos in tqdm(range(prompts.shape[1], SEQ - 1), desc="generate", mininterval=5):
        logits, _, _ = model(ids[-1], caches, start=pos)
        ids.append(logits[:, -1:].argmax(-1))
    ids = torch.cat(ids, dim=1)  # [N, SEQ]
    _, h, aux = model(ids)  # one full pass for the stored states
    mask = torch.zeros_like(ids)
    mask[:, prompts.shape[1]:] = 1
    return {"input_ids": ids, "loss_mask": mask, "hidden_state": h.bfloat16(), "aux_hidden_state": aux.bfloat16()}


def write_samples(folder: Path, data: dict, gz: bool) -> None:
    n = data["input_ids"].shape[0]
    for i in range(n):
        g = (i // ROWS) * ROWS
        d = folder / f"rows_{g}-{g + ROWS}"
        d.mkdir(parents=True, exist_ok=True)
        item = {
            "input_ids": data["input_ids"][i].clone(),  # [T]
            "loss_mask": data["loss_mask"][i].clone(),  # [T]
            "hidden_state": data["hidden_state"][i : i + 1].clone(),  # [1, T, H]
            "aux_hidden_state": data["aux_hidden_state"][i : i + 1].clone(),  # [1, T, 3H]
        }
        buf = io.BytesIO()
        torch.save(item, buf)
        if gz:
            (d / f"data_{i}.ckpt.gz").write_bytes(gzip.compress(buf.getvalue(), compresslevel=9, mtime=0))
        else:
            (d / f"data_{i}.ckpt").write_bytes(buf.getvalue())


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


def train_draft(target: TinyTarget, train: dict, kept: torch.Tensor, epochs: int, steps: int = 3) -> Eagle3Draft:
    torch.manual_seed(SEED + 1)
    draft = Eagle3Draft(DraftConfig.from_dict(draft_config_dict()))
    with torch.no_grad():
        draft.embed_tokens.weight.copy_(target.embed_tokens.weight)  # borrowed from the target, frozen
        draft.lm_head.weight.copy_(target.lm_head.weight[kept])  # warm start on the kept rows
    draft.embed_tokens.weight.requires_grad_(False)
    ids, mask = train["input_ids"], train["loss_mask"]
    aux = train["aux_hidden_state"].float()[:, :-1]  # [N, T-1, 3H]
    with torch.no_grad():  # target logits from the stored (bf16) last hidden state, as SpecForge does
        tlogits = target.lm_head(train["hidden_state"].float())  # [N, T, V]
    in_draft = torch.zeros(VOCAB, dtype=torch.bool)
    in_draft[kept] = True
    opt = torch.optim.AdamW([p for p in draft.parameters() if p.requires_grad], lr=3e-3, weight_decay=0.0)
    g = torch.Generator().manual_seed(SEED + 2)
    N, T = ids.shape
    batch = 16
    total = epochs * math.ceil(N / batch)
    bar = tqdm(total=total, desc="draft", mininterval=5)
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
    spec = out / "tiny_draft_speculators"
    spec.mkdir(parents=True, exist_ok=True)
    layer = {k: v for k, v in cfg.items() if k not in ("architectures", "draft_vocab_size", "target_hidden_size",
                                                       "eagle_config", "torch_dtype")}
    layer["architectures"] = ["LlamaForCausalLM"]
    spec_cfg = {
        "architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
        "transformer_layer_config": layer, "draft_vocab_size": DRAFT_VOCAB, "norm_before_residual": False,
        "target_hidden_size": H, "eagle_aux_hidden_state_layer_ids": AUX_CONFIG_IDS,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": AUX_CONFIG_IDS}, "torch_dtype": "bfloat16",
    }
    (spec / "config.json").write_text(json.dumps(spec_cfg, indent=2) + "\n")
    save_file(state_dict_bf16(draft, "layers.0.", False), str(spec / "model.safetensors"), metadata={"format": "pt"})
    np.save(spec / "d2t.npy", d2t.numpy())
    np.save(spec / "t2d.npy", t2d.numpy())


def save_target(out: Path, target: TinyTarget, tok: Tokenizer) -> None:
    folder = out / "tiny_target"
    folder.mkdir(parents=True, exist_ok=True)
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H, "intermediate_size": INTER,
        "num_attention_heads": HEADS, "num_key_value_heads": HEADS, "num_hidden_layers": LAYERS,
        "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 512,
        "vocab_size": VOCAB, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
        "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
    }
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    sd = target.state_dict()
    # bf16 like the drafts: a draft without embed_tokens borrows exactly the rows the others carry
    tensors = {k: sd[k].detach().to(torch.bfloat16).contiguous() for k in ("embed_tokens.weight", "norm.weight", "lm_head.weight")}
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "vocab.json").write_text(json.dumps(tok.tokens, ensure_ascii=False) + "\n")


NORM_SEED = 20240607  # the seed of the folded final-norm weight (independent of everything else)


def final_norm_weight() -> torch.Tensor:
    """The tiny target's final-norm weight w [H]: powers of two 2^k, k in -4..4, seeded (bf16-exact)."""
    g = torch.Generator().manual_seed(NORM_SEED)
    return (2.0 ** torch.randint(-4, 5, (H,), generator=g).float()).to(torch.bfloat16)


def _rewrite_sample(path: Path, w: torch.Tensor) -> None:
    """hidden_state *= w in one sample file, written back as `write_samples` writes it."""
    from helpers.tensor_files import torch_load

    raw = path.read_bytes()
    gz = path.suffix == ".gz"
    item = torch_load(path, data=gzip.decompress(raw) if gz else raw)
    item = {k: v.clone() for k, v in item.items()}
    item["hidden_state"] = (item["hidden_state"] * w).contiguous()  # exact in bf16: w is a power of two
    buf = io.BytesIO()
    torch.save(item, buf)
    path.write_bytes(gzip.compress(buf.getvalue(), compresslevel=9, mtime=0) if gz else buf.getvalue())


def fold_final_norm(out: Path) -> bool:
    """Give tiny_target a non-trivial final norm without changing what it computes; False if done already.

    norm.weight: 1 -> w; lm_head[:, i] -> lm_head[:, i] / w[i]; each sample's hidden_state (stored
    after the final norm, h = 1 * rmsnorm(x)) -> w * h. Then lm_head'(h') = lm_head(h) exactly,
    while lm_head'(norm'(h')) = lm_head'(w * w * rmsnorm(x)) differs: the norm applied twice.
    The config's tie_word_embeddings becomes false (lm_head is no longer embed_tokens).
    Idempotent: a target whose norm.weight already is w is left alone.
    """
    from safetensors.torch import load_file

    folder = out / "tiny_target"
    tensors = load_file(str(folder / "model.safetensors"))
    w = final_norm_weight()
    if torch.equal(tensors["norm.weight"], w):
        return False
    if not bool((tensors["norm.weight"] == 1).all()):
        raise SystemExit(f"{folder}: norm.weight is neither 1 nor the folded w: regenerate with make_samples.py")
    tensors["norm.weight"] = w.clone()
    tensors["lm_head.weight"] = (tensors["lm_head.weight"] / w).contiguous()  # exact: w is a power of two
    save_file({k: tensors[k] for k in ("embed_tokens.weight", "norm.weight", "lm_head.weight")},
              str(folder / "model.safetensors"), metadata={"format": "pt"})
    cfg = json.loads((folder / "config.json").read_text())
    cfg["tie_word_embeddings"] = False
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    for f in sorted((out / "tiny_hidden_states").rglob("data_*.ckpt*")):
        _rewrite_sample(f, w)
    return True


# -- scoring (the kit's evaluate module does this in full; this is the script's own check) ----------
@torch.no_grad()
def quick_accuracy(draft_dir: Path, samples: Path, target_dir: Path) -> dict[str, float]:
    """Step-0 top-1 with the offset reading on loss_mask positions t: label token t+2, and the
    target's own argmax at t+1 (lm_head of tiny_target over the stored hidden state)."""
    model = load_draft(draft_dir, device="cpu", dtype=torch.float32)
    from helpers.checkpoint import open_checkpoint

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
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "data_samples"))
    ap.add_argument("--target-steps", type=int, default=400)
    ap.add_argument("--draft-epochs", type=int, default=20)
    args = ap.parse_args()
    out = Path(args.out)
    t0 = time.time()
    torch.manual_seed(SEED)
    torch.set_num_threads(THREADS)
    torch.use_deterministic_algorithms(True)

    docs = stdlib_docstrings()
    tok = Tokenizer(docs, VOCAB, SEED)
    encoded = [tok.encode(d) for d in docs]
    stream = torch.tensor([i for e in encoded for i in e + tok.encode("\n\n")], dtype=torch.int64)
    counts = np.bincount(stream.numpy(), minlength=VOCAB)
    top = np.sort(counts)[::-1][:1000].astype(float)
    slope = np.polyfit(np.log(np.arange(1, 1001)), np.log(np.maximum(top, 1)), 1)[0]
    print(f"text: {len(docs)} docstrings, {stream.numel():,} tokens; rank-frequency slope {slope:.2f} (Zipf ~ -1)")

    # The target is trained on "repeat" units, a chunk of real text, a blank line, the chunk
    # again: a tiny model trained briefly on plain text only repeats its few likeliest tokens
    # under greedy decoding, while one that has learnt to repeat continues a real prompt with
    # varied, Zipf-distributed real tokens - which is what a draft vocab needs to be built from.
    chunks = [(d, e[s : s + PROMPT]) for d, e in enumerate(encoded) for s in range(0, len(e) - PROMPT + 1, PROMPT)]
    sep = tok.encode("\n\n")
    units = torch.tensor([c + sep + c + sep for _, c in chunks], dtype=torch.int64)  # [n_chunks, 2*(PROMPT+2)]
    print(f"target trains on {len(chunks):,} repeat units of {units.shape[1]} tokens")
    target = train_target(units, args.target_steps)
    val_docs = {d for d in range(len(encoded)) if d % 6 == 0}  # every sixth docstring forms the val split
    tr = [c + sep for d, c in chunks if d not in val_docs]
    va = [c + sep for d, c in chunks if d in val_docs]
    g = torch.Generator().manual_seed(SEED + 4)
    tr = [tr[i] for i in torch.randperm(len(tr), generator=g)[:N_TRAIN].tolist()]
    va = [va[i] for i in torch.randperm(len(va), generator=g)[:N_VAL].tolist()]
    data = generate(target, torch.tensor(tr + va, dtype=torch.int64))
    sel = tr + va
    copied = float((data['input_ids'][:, PROMPT + 2 : 2 * PROMPT + 2] == data['input_ids'][:, :PROMPT]).float().mean())
    print(f'target repeats its prompt token for token in {copied:.1%} of positions')
    train = {k: v[:N_TRAIN] for k, v in data.items()}
    val = {k: v[N_TRAIN:] for k, v in data.items()}
    distinct = len({tuple(r.tolist()) for r in data["input_ids"][:, PROMPT:]})
    gen_ids = data["input_ids"][:, PROMPT:]
    print(f"generated {len(sel)} sequences of {SEQ} tokens ({distinct} distinct continuations, "
          f"{len(torch.unique(gen_ids))} distinct generated tokens)")
    for row in data["input_ids"][:3]:
        print("  ", repr(tok.decode(row[:PROMPT].tolist())), "->", repr(tok.decode(row[PROMPT:].tolist())))

    hs = out / "tiny_hidden_states"
    if hs.exists():
        shutil.rmtree(hs)
    write_samples(hs / "train", train, gz=False)
    write_samples(hs / "val", val, gz=True)

    freqs = torch.bincount(train["input_ids"][train["loss_mask"] == 1], minlength=VOCAB)
    mapping = build_from_frequencies(freqs, DRAFT_VOCAB, VOCAB)
    kept = mapping.targets("offset")
    cover = float(torch.isin(val["input_ids"][val["loss_mask"] == 1], kept).float().mean())
    print(f"draft vocab {DRAFT_VOCAB} of {VOCAB}; val coverage {cover:.1%}; leading zeros {mapping.leading_zero_run}")

    draft = train_draft(target, train, kept, args.draft_epochs)
    save_drafts(out, draft, mapping)
    save_target(out, target, tok)
    fold_final_norm(out)
    for split in ("train", "val"):
        acc = quick_accuracy(out / "tiny_draft_sglang", hs / split, out / "tiny_target")
        print(f"{split}: top-1 (offset reading) {acc['top1_token']:.2%} vs token t+2, "
              f"{acc['top1_target_argmax']:.2%} vs target argmax, {acc['tokens']} tokens")
    print(f"done in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
