"""Does a draft fit its target? The pure comparison, as structured mismatches.

`compare_to_target(draft_cfg, target_cfg, draft_embed=..., target_embed=..., fc_in=...)` compares
what a draft was built for with what the target is: vocab size, the hidden size fc expects
(`target_hidden_size`, and fc's input width / 3), `embed_tokens` (equal, equal up to a constant
factor such as Gemma's sqrt(hidden_size), or different), aux layer ids against the target's
`num_hidden_layers`, and the context the draft's RoPE covers (`max_position_embeddings`,
`rope_theta`, `rope_scaling`) against the target's. It reads nothing: configs are dicts, the
embeddings tensors (whole, or the same rows of both). The doctor turns each `Mismatch` into a
finding (`helpers.doctor.checks_target`); anything that loads a target can call it too. It is also the
home of `text_config` (a multimodal target's language-model part).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from helpers.io.configs import flat_config

_TEXT_KEYS = ("text_config", "language_config", "llm_config")


@dataclass(frozen=True)
class Mismatch:
    """One way a draft does not fit its target: the field, both values, and what it means."""

    field: str  # vocab_size, hidden_size, embed_tokens, aux_layer_ids, max_position_embeddings, rope_theta, rope_scaling
    draft: object
    target: object
    detail: str
    scale: float | None = None  # embed_tokens equal up to this constant factor (draft = scale x target)

    def as_dict(self) -> dict:
        return asdict(self)


def text_config(cfg: dict) -> dict:
    """A target config's language-model part (multimodal configs nest it under text_config)."""
    for k in _TEXT_KEYS:
        if isinstance(cfg.get(k), dict) and "num_hidden_layers" in cfg[k]:
            return cfg[k]
    return cfg


def _int(x):
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def _aux_ids(cfg: dict) -> list[int]:
    eagle = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    ids = []
    for v in (eagle.get("eagle_aux_hidden_state_layer_ids"), cfg.get("eagle_aux_hidden_state_layer_ids")):
        if isinstance(v, list):
            ids += [i for i in v if _int(i) is not None and i not in ids]
    return ids


def compare_to_target(draft_cfg: dict, target_cfg: dict, *, draft_embed: torch.Tensor | None = None,
                      target_embed: torch.Tensor | None = None, fc_in: int | None = None) -> list[Mismatch]:
    """Every way the draft (its config.json, embedding, fc input width) does not fit the target."""
    d, t = flat_config(draft_cfg or {}), text_config(target_cfg or {})
    out: list[Mismatch] = []
    dv = _int(d.get("target_vocab_size")) or _int(d.get("vocab_size"))
    tv = _int(t.get("vocab_size"))
    if dv and tv and dv != tv:
        out.append(Mismatch("vocab_size", dv, tv, f"the draft was built for a {dv:,}-token vocab, the target has {tv:,}"))
    th = _int(t.get("hidden_size"))
    dh = _int(d.get("target_hidden_size")) or _int(d.get("hidden_size"))
    if th and dh and dh != th:
        out.append(Mismatch("hidden_size", dh, th, f"the draft expects target hidden size {dh:,} "
                            f"(target_hidden_size), the target's is {th:,}"))
    elif th and fc_in and fc_in != 3 * th and fc_in % th == 0:
        out.append(Mismatch("hidden_size", fc_in // 3 if fc_in % 3 == 0 else fc_in, th,
                            f"fc takes {fc_in:,} inputs = {fc_in // th} x the target's hidden size {th:,}, not 3 x"))
    elif th and fc_in and fc_in != 3 * th:
        out.append(Mismatch("hidden_size", fc_in / 3, th, f"fc takes {fc_in:,} inputs, not 3 x the target's {th:,}"))
    n = _int(t.get("num_hidden_layers"))
    ids = _aux_ids(d)
    if n and ids:
        bad = [i for i in ids if i < 0 or i >= n]
        last = [i for i in ids if i == n - 1]
        if bad or last:
            out.append(Mismatch("aux_layer_ids", ids, n,
                                (f"ids {bad} are outside the target's {n} layers (0..{n - 1})" if bad else "")
                                + ("; " if bad and last else "")
                                + (f"id {n - 1} is the last layer: SGLang captures the input of id+1, which does not "
                                   "exist" if last else "")))
    if draft_embed is not None and target_embed is not None:
        m = compare_embeddings(draft_embed, target_embed, _int(t.get("hidden_size")))
        if m is not None:
            out.append(m)
    out += _context(d, t)
    return out


def compare_embeddings(draft: torch.Tensor, target: torch.Tensor, hidden: int | None = None) -> Mismatch | None:
    """None when equal (within bf16 rounding); else a Mismatch saying how they differ."""
    if tuple(draft.shape) != tuple(target.shape):
        return Mismatch("embed_tokens", list(draft.shape), list(target.shape),
                        f"the draft's embed_tokens is {list(draft.shape)}, the target's {list(target.shape)}")
    a, b = draft.float(), target.float()
    if torch.allclose(a, b, rtol=1e-2, atol=1e-3):
        return None
    denom = float((b * b).sum())
    scale = float((a * b).sum()) / denom if denom else 0.0
    if scale and torch.allclose(a, b * scale, rtol=2e-2, atol=1e-3 * max(1.0, abs(scale))):
        sq = f"; sqrt(hidden_size) = {math.sqrt(hidden):.4g}" if hidden else ""
        gemma = hidden and abs(abs(scale) - math.sqrt(hidden)) / math.sqrt(hidden) < 0.02
        inv = hidden and abs(abs(scale) - 1 / math.sqrt(hidden)) * math.sqrt(hidden) < 0.02
        why = (" (the target scales its embedding by sqrt(hidden_size), as Gemma does; the draft's copy has it baked in)"
               if gemma else " (the draft's copy misses the target's sqrt(hidden_size) embedding scale)" if inv else "")
        return Mismatch("embed_tokens", f"{scale:.4g} x target", "target",
                        f"the draft's embed_tokens is the target's times {scale:.4g}{sq}{why}", scale=scale)
    rows = int((~torch.isclose(a, b, rtol=1e-2, atol=1e-3)).any(dim=-1).sum())
    return Mismatch("embed_tokens", "differs", "target",
                    f"{rows:,} of {a.shape[0]:,} rows differ (max |diff| {float((a - b).abs().max()):.3g}): "
                    "another target revision or model")


def _context(d: dict, t: dict) -> list[Mismatch]:
    out = []
    dm, tm = _int(d.get("max_position_embeddings")), _int(t.get("max_position_embeddings"))
    if dm and tm and dm < tm:
        out.append(Mismatch("max_position_embeddings", dm, tm,
                            f"the draft's RoPE covers {dm:,} positions, the target serves {tm:,}"))
    dr, tr = d.get("rope_theta"), t.get("rope_theta")
    if isinstance(dr, (int, float)) and isinstance(tr, (int, float)) and float(dr) != float(tr):
        out.append(Mismatch("rope_theta", dr, tr, f"rope_theta {dr:g} in the draft, {tr:g} in the target"))
    ds, ts = d.get("rope_scaling") or None, t.get("rope_scaling") or None
    if ts and not ds:
        kind = ts.get("rope_type", ts.get("type")) if isinstance(ts, dict) else ts
        out.append(Mismatch("rope_scaling", None, ts, f"the target extends its context with rope_scaling ({kind}); "
                            "the draft has none"))
    return out


# -- does an embedding look untrained? ---------------------------------------------------------------
# A fresh initialisation (normal or uniform, any scale) draws every entry independently: its top singular
# value sits at the edge random-matrix theory gives for i.i.d. entries, (sqrt(rows) + sqrt(hidden)) x the
# entries' std, and its row norms are all about equal. A trained embedding is strongly anisotropic (a few
# directions carry much of the variance: the ratio below is 2.4 for the bundled 800-step engine pair's
# and far larger for real models') and its row norms spread with token frequency.
INIT_ISOTROPY_MAX = 1.3  # top singular value^2 over the i.i.d. edge: ~1.0 for a fresh init
INIT_ROW_SPREAD_MAX = 1.5  # row-norm spread over the i.i.d. value 1/sqrt(2 hidden): ~1.0 normal, ~0.63 uniform
UNCORRELATED_COS = 0.1  # mean cosine of matching rows below which two embeddings share nothing


@dataclass(frozen=True)
class InitSignature:
    """Statistics of an embedding sample that tell a fresh initialisation from a trained table."""

    rows: int
    hidden: int
    std: float  # of all entries
    isotropy: float  # top singular value^2 of the centred sample / (sqrt(rows) + sqrt(hidden))^2 / variance
    row_spread: float  # std / mean of the row norms, times sqrt(2 hidden)

    @property
    def untrained(self) -> bool:
        return self.isotropy < INIT_ISOTROPY_MAX and self.row_spread < INIT_ROW_SPREAD_MAX

    def words(self, initializer_range: float | None = None) -> str:
        """'isotropic like a fresh init (top singular value 1.01 x the i.i.d. edge, row norms 0.99 x as even
        as i.i.d.), std 0.0200 = initializer_range 0.02'."""
        text = (f"isotropic like a fresh initialisation (top singular value {self.isotropy:.2f} x what independent "
                f"entries give, row-norm spread {self.row_spread:.2f} x theirs; a trained table is far above 1), "
                f"entry std {self.std:.4g}")
        if isinstance(initializer_range, (int, float)) and initializer_range > 0 and \
                abs(self.std - initializer_range) <= 0.1 * initializer_range:
            text += f" = the config's initializer_range {initializer_range:g}"
        elif abs(self.std - 1.0) <= 0.1:
            text += " (torch's nn.Embedding default init is N(0, 1))"
        return text

    def as_dict(self) -> dict:
        return asdict(self) | {"untrained": self.untrained}


def _top_eigenvalue(c: torch.Tensor) -> float:
    """The largest squared singular value of `c`, from the Gram matrix of its smaller side: an SVD of a
    2048 x 7168 sample (Kimi's width) takes seconds; LOBPCG on the 2048 x 2048 Gram matrix, started from
    a fixed vector (no random state drawn), agrees to about 1e-4 in a fraction of that."""
    g = c @ c.T if c.shape[0] <= c.shape[1] else c.T @ c
    if g.shape[0] <= 512:
        return float(torch.linalg.eigvalsh(g.double())[-1])
    start = g.sum(dim=1, keepdim=True) + 1.0  # one power step from the ones vector
    try:
        return float(torch.lobpcg(g, k=1, X=start / start.norm(), largest=True, niter=50, tol=1e-5)[0][0])
    except Exception:  # noqa: BLE001 - LOBPCG did not converge: the exact eigenvalues, slower
        return float(torch.linalg.eigvalsh(g.double())[-1])


def init_signature(sample: torch.Tensor) -> InitSignature | None:
    """The `InitSignature` of rows of an embedding (None for fewer than 16 rows or a constant table)."""
    if sample.dim() != 2 or sample.shape[0] < 16 or sample.shape[1] < 2:
        return None
    x = sample.float()
    n, h = x.shape
    c = x - x.mean(dim=0, keepdim=True)
    var = float((c * c).mean())
    if not math.isfinite(var) or var <= 0:
        return None
    top = _top_eigenvalue(c)
    rn = x.norm(dim=1)
    spread = float(rn.std() / rn.mean()) * math.sqrt(2 * h) if float(rn.mean()) > 0 else float("inf")
    return InitSignature(rows=n, hidden=h, std=float(x.std()), isotropy=top / ((math.sqrt(n) + math.sqrt(h)) ** 2 * var),
                         row_spread=spread)


def row_cosine(draft: torch.Tensor, target: torch.Tensor) -> float:
    """Mean cosine similarity of the matching rows of two same-shape tables (about 0 when unrelated)."""
    return float(torch.nn.functional.cosine_similarity(draft.float(), target.float(), dim=-1).nan_to_num(0.0).mean())
