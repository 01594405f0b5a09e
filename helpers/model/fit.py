"""Does a draft fit its target? The comparison, as structured mismatches, and the door's refusals on it.

`compare_to_target(draft_cfg, target_cfg, draft_embed=..., target_embed=..., fc_in=...)` compares
what a draft was built for with what the target is: vocab size, the hidden size fc expects
(`target_hidden_size`, and fc's input width / 3), `embed_tokens` (equal, equal up to a constant
factor such as Gemma's sqrt(hidden_size), or different), aux layer ids against the target's
`num_hidden_layers`, and the context the draft's RoPE covers (`max_position_embeddings`,
`rope_theta`, `rope_scaling`) against the target's. It reads nothing: configs are dicts, the
embeddings tensors (whole, or the same rows of both). The doctor turns each `Mismatch` into a
finding (`helpers.doctor.checks_target`); anything that loads a target can call it too. It is also the
home of `text_config` (a multimodal target's language-model part).

The refusals built on it read an open checkpoint's headers and a few rows, nothing more, and raise
one `BadInputError` line: `check_fit` (vocab and hidden size, at the door:
`helpers.model.preflight`), `check_aux_layers` (a given aux-layer list against fc's width and the
target's layers), `check_target_fit` (what `speculate` refuses once the pair is loaded, from the
files), with `embed_rows` / `embed_agreement` (the same sampled rows of both embed_tokens).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from helpers.core.errors import BadInputError
from helpers.engines.registry import DEFAULT_ENGINE, aux_convention, captured_layers, engine_at
from helpers.io.configs import flat_config
from helpers.io.origin import Origin

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


# -- the door's refusals: a draft that does not fit its target, from the files alone ------------------------
EAGLE_AUX = 3  # hidden states an EAGLE-3 draft's fc concatenates
EMBED_ROWS = 8  # rows read per block, 8 blocks spread over the vocab: a few KB even for a 163,840-token target


def mapping_vocab(ck) -> int | None:
    """The target vocab a mapping-only draft was built for (its t2d's length), else None."""
    from helpers.io.checkpoint import load_mapping

    try:
        return load_mapping(ck).target_vocab_size
    except BadInputError:
        return None


def flat_vocab(cfg: dict | None) -> int | None:
    d = flat_config(cfg or {})
    v = d.get("target_vocab_size") or d.get("vocab_size")
    return v if isinstance(v, int) else None


def check_fit(ck, fc_key, target_cfg: dict, shown: str, target_shown: str) -> None:
    """Vocab and hidden size of the draft against the target, from configs and headers only."""
    fc_in = ck.tensors.shape(fc_key)[1] if fc_key is not None and len(ck.tensors.shape(fc_key)) == 2 else None
    found = [m for m in compare_to_target(ck.config or {}, target_cfg, fc_in=fc_in)
             if m.field in ("vocab_size", "hidden_size")]
    tv = text_config(target_cfg).get("vocab_size")
    if not found and isinstance(tv, int) and not flat_vocab(ck.config):
        mv = mapping_vocab(ck)  # a mapping-only draft: the vocab its t2d was built for
        if mv and mv != tv:
            raise BadInputError(shown, f"does not fit the target {target_shown}: vocab_size: the draft's mapping "
                                f"was built for a {mv:,}-token vocab, the target has {tv:,}")
    if found:
        raise BadInputError(shown, f"does not fit the target {target_shown}: "
                            + "; ".join(f"{m.field}: {m.detail}" for m in found))


def check_aux_layers(layers, *, engine: str = DEFAULT_ENGINE, ck=None, fc_key=None, target_cfg: dict | None = None,
                     flag: str = "--aux-layers") -> tuple[int, ...]:
    """A given aux-layer id list: as many ids as the draft's fc concatenates, inside the target."""
    layers = tuple(int(i) for i in layers)
    t = text_config(target_cfg or {})
    hidden = t.get("hidden_size")
    want, why = EAGLE_AUX, "an EAGLE-3 draft concatenates 3 hidden states"
    if ck is not None and fc_key is not None and isinstance(hidden, int) and hidden > 0:
        fc_in = ck.tensors.shape(fc_key)[1]
        if fc_in % hidden == 0:
            want = fc_in // hidden
            why = f"the draft's fc takes {fc_in:,} inputs = {want} x the target's hidden size {hidden:,}"
    if len(layers) != want:
        raise BadInputError(None, f"{flag} {','.join(map(str, layers))}: {len(layers)} layer(s), but {why}: give {want} ids")
    n = t.get("num_hidden_layers")
    if isinstance(n, int) and n > 0:
        got = captured_layers(engine, list(layers), n)
        bad = [i for i in got if not 0 <= i < n]
        if bad:
            add = aux_convention(engine)
            shift = f" ({engine_at(engine).name} adds {add} to configured ids)" if isinstance(add, int) and add else ""
            raise BadInputError(None, f"{flag} {','.join(map(str, layers))} capture the input of layers {got}{shift}, "
                                f"but the target has {n} layers (0..{n - 1})")
    return layers


def embed_rows(ck, target_dir) -> tuple | None:
    """(the draft's rows, the target's rows): the same 8 blocks of `EMBED_ROWS` rows of both
    embed_tokens, spread over the vocab and read from the files alone; None when either has none,
    or the shapes differ (then only the shapes say anything: the size checks name them)."""
    from helpers.io.checkpoint import open_checkpoint

    dk = ck.tensors.find("embed_tokens.weight")
    if dk is None:
        return None
    try:
        tck = open_checkpoint(target_dir)
    except BadInputError:
        return None
    tk = tck.tensors.find("embed_tokens.weight") or tck.tensors.find("model.embed_tokens.weight")
    if tk is None or ck.tensors.shape(dk) != tck.tensors.shape(tk) or len(ck.tensors.shape(dk)) != 2:
        return None
    v = ck.tensors.shape(dk)[0]
    starts = sorted({min(v * (2 * j + 1) // 16, max(v - EMBED_ROWS, 0)) for j in range(8)})
    mine = torch.cat([ck.tensors.get_rows(dk, a, a + EMBED_ROWS).float() for a in starts])
    ours = torch.cat([tck.tensors.get_rows(tk, a, a + EMBED_ROWS).float() for a in starts])
    return mine, ours


def embed_agreement(ck, target_dir) -> tuple[float, int] | None:
    """Mean cosine similarity of sampled rows (`embed_rows`) of the draft's embed_tokens and the
    target's, and the rows compared; None when there is nothing to compare. A draft trained with the
    target's frozen embedding has 1.0; one built for another target ~0."""
    rows = embed_rows(ck, target_dir)
    if rows is None:
        return None
    x, y = rows
    keep = (x.norm(dim=1) > 0) & (y.norm(dim=1) > 0)
    if not keep.any():
        return None
    s = torch.nn.functional.cosine_similarity(x[keep], y[keep], dim=1)
    return float(s.mean()), int(s.numel())


def check_target_fit(ck, target: str, target_cfg: dict, *, shown: str | None = None) -> None:
    """What `speculate` refuses after loading the pair (`helpers.model.target.draft_mismatches`: vocab,
    hidden size, the draft's embed_tokens against the target's), from the files alone: one
    `BadInputError` line, before anything loads. The embedding is compared on `embed_rows`' rows."""
    rows = embed_rows(ck, target) if not Origin(target).is_remote else None
    fc = ck.tensors.find("fc.weight")
    fc_in = ck.tensors.shape(fc)[1] if fc is not None and len(ck.tensors.shape(fc)) == 2 else None
    found = compare_to_target(ck.config or {}, target_cfg, draft_embed=None if rows is None else rows[0],
                              target_embed=None if rows is None else rows[1], fc_in=fc_in)
    bad = [f"{m.field}: {m.detail}" for m in found if m.field in ("vocab_size", "hidden_size", "embed_tokens")]
    if bad:
        raise BadInputError(shown or ck.origin or str(ck.path), f"does not fit the target {target}: " + "; ".join(bad)
                            + f" (compared on {0 if rows is None else len(rows[0])} embed_tokens rows)")
