"""The door: every input of a run checked before anything heavy loads, cheapest checks first.

`preflight(...)` is the one validation layer every front end calls before it loads a model or
runs a notebook: the CLI commands (`capture`, `speculate`, `doctor`, `diff`, `report`), the
report's `validate`, the notebooks' `helpers.ui.notebook.setup()` (on the parameters cell's
values) and the dashboard. It checks, in this order, and stops at the first problem with one
`BadInputError` line naming the input:

1. conflicting flags (`--target` and `--target-config` together) and counts (`--max-prompts 0`);
2. paths (`helpers.io.inputs.input_path`): exists, file or folder as needed, readable, UTF-8 for
   text inputs; remote locations pass where the input may be remote;
3. prompt records (`helpers.io.prompts.check_prompts`): each needs a user turn (and an answer
   when teacher-forced); errors name the line;
4. the target's config: present, and not a draft's (a draft folder given as `--target`);
5. the draft: a config and weights where the command runs the draft (`need_weights`);
6. draft/target fit from configs and tensor headers only (`helpers.model.fit.compare_to_target`:
   vocab, hidden size; the mapping's target vocab when the draft has no config);
7. aux layers: a given `--aux-layers` list against the draft's fc width (fc takes
   n_aux x hidden inputs; an EAGLE-3 draft without weights at hand: 3) and the target's layers.

Nothing here loads weights beyond `d2t`/`t2d`, and nothing is written. The drafting settings
(`--steps/--topk/--draft-tokens`) are not checked here: they have one check of their own, with
the `Drafting` value they describe.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from helpers.core.engines import captured_layers
from helpers.core.errors import BadInputError
from helpers.io import remote
from helpers.io.inputs import conflicting, input_path
from helpers.io.prompts import check_prompts
from helpers.model.fit import compare_to_target, text_config

EAGLE_AUX = 3  # hidden states an EAGLE-3 draft's fc concatenates


@dataclass(frozen=True)
class Checked:
    """The inputs as checked: paths (absolute where local) and what was learnt on the way."""

    checkpoint: str | None = None
    target: str | None = None
    target_config: str | None = None
    prompts: str | None = None
    prompt_records: int | None = None
    embed_from: str | None = None
    previous: str | None = None
    samples: str | None = None
    target_head: str | None = None
    aux_layers: tuple[int, ...] | None = None
    opened: object = None  # the draft's open `Checkpoint` when the door read it (pass it on: no second read)


def _abs(p: str | None) -> str | None:
    return p if p is None or remote.is_remote(p) else str(Path(p).resolve())


def _looks_like_draft(cfg: dict) -> bool:
    archs = " ".join(map(str, cfg.get("architectures") or []))
    return ("eagle" in archs.lower() or "speculator" in archs.lower() or "draft_vocab_size" in cfg
            or "speculators_config" in cfg or "transformer_layer_config" in cfg)


def target_config_of(target: str | None, target_config: str | None, *, flag: str = "--target") -> dict | None:
    """The target's config.json as a dict (from its folder or the file), refused in one line when
    missing, unreadable or a draft's config."""
    from helpers.io.checkpoint import read_config

    if target:
        if not remote.is_remote(target) and not (Path(target) / "config.json").is_file():
            raise BadInputError(target, f"holds no config.json: {flag} takes a Hugging Face model folder "
                                "(config.json, weights, tokenizer)")
        cfg, where = read_config(target), target
    elif target_config:
        cfg, where = read_config(target_config), target_config
    else:
        return None
    if not isinstance(cfg, dict):
        raise BadInputError(where, "the target's config.json is not a JSON object")
    if _looks_like_draft(cfg):
        raise BadInputError(where, f"is a draft checkpoint (architectures {cfg.get('architectures')}), not the target: "
                            f"{flag} takes the target model the draft speculates for")
    return cfg


def _draft(checkpoint: str, need_weights: bool, what: str):
    from helpers.io.checkpoint import open_checkpoint

    ck = open_checkpoint(checkpoint)
    shown = ck.origin or checkpoint
    fc = ck.tensors.find("fc.weight")
    if need_weights and (ck.config is None or fc is None):
        has_mapping = bool(ck.mapping_files) or ck.tensors.find("d2t") is not None
        lacking = "no config.json" if ck.config is None else "no draft weights (fc.weight)"
        raise BadInputError(shown, f"holds {lacking}: {what} runs the draft, so it needs the whole checkpoint "
                            "(config.json and weights)" + ("; this folder holds only a d2t/t2d mapping, which "
                                                           "inspect and doctor read" if has_mapping else ""))
    return ck, fc


def _mapping_vocab(ck) -> int | None:
    """The target vocab a mapping-only draft was built for (its t2d's length), else None."""
    from helpers.io.checkpoint import load_mapping

    try:
        return load_mapping(ck).target_vocab_size
    except BadInputError:
        return None


def flat_vocab(cfg: dict | None) -> int | None:
    from helpers.io.checkpoint import flat_config

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
        mv = _mapping_vocab(ck)  # a mapping-only draft: the vocab its t2d was built for
        if mv and mv != tv:
            raise BadInputError(shown, f"does not fit the target {target_shown}: vocab_size: the draft's mapping "
                                f"was built for a {mv:,}-token vocab, the target has {tv:,}")
    if found:
        raise BadInputError(shown, f"does not fit the target {target_shown}: "
                            + "; ".join(f"{m.field}: {m.detail}" for m in found))


def check_aux_layers(layers, *, engine: str = "sglang", ck=None, fc_key=None, target_cfg: dict | None = None,
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
            shift = " (SGLang adds 1 to configured ids)" if engine == "sglang" else ""
            raise BadInputError(None, f"{flag} {','.join(map(str, layers))} capture the input of layers {got}{shift}, "
                                f"but the target has {n} layers (0..{n - 1})")
    return layers


def preflight(*, checkpoint=None, target=None, target_config=None, prompts=None, max_prompts=None,
              max_prompts_flag: str = "--max-prompts", need_answer: bool = False, embed_from=None,
              previous=None, samples=None, target_head=None, aux_layers=None, engine: str = "sglang",
              need_weights: bool = False, what: str = "this command", checkpoint_flag: str = "CHECKPOINT",
              target_flag: str = "--target", target_is_model: bool = True, fit: bool = True) -> Checked:
    """Check a run's inputs at the door (see the module docstring); returns them checked.

    `target_is_model`: the target is loaded with transformers (capture, speculate, a report's
    notebook 07): a local folder. Otherwise (doctor) it may be remote, and only its config is read.
    `fit=False`: the draft/target fit is left to the caller (the doctor reports it as findings).
    """
    # 1. flags that contradict each other, counts
    conflicting({target_flag: target, "--target-config": target_config},
                "both name the target's config (the folder's config.json, or the file): give one")
    if max_prompts is not None and int(max_prompts) < 1:
        raise BadInputError(None, f"{max_prompts_flag} must be at least 1, got {max_prompts}")
    # 2. paths, cheapest first
    checkpoint = input_path(checkpoint, "file or folder", remote_ok=True)  # as open_checkpoint says it
    target = input_path(target, "target folder", kind="folder", remote_ok=not target_is_model, flag=target_flag)
    target_config = input_path(target_config, "target config", text=True, remote_ok=True, flag="--target-config")
    prompts = input_path(prompts, "prompt file", kind="file", text=True, flag="--prompts")
    embed_from = input_path(embed_from, "embed_tokens file or folder", remote_ok=True, flag="--embed-from")
    previous = input_path(previous, "previous checkpoint", remote_ok=True, flag="--previous")
    samples = input_path(samples, "samples folder", kind="folder", flag="--samples")
    target_head = input_path(target_head, "target head (file or folder)", remote_ok=True, flag="--target-head")
    # 3. prompt records
    records = check_prompts(prompts, max_prompts, need_answer=need_answer, flag=max_prompts_flag) if prompts else None
    # 4. the target's config
    tcfg = target_config_of(target, target_config, flag=target_flag)
    # 5. the draft
    ck = fc = None
    if checkpoint and (need_weights or (fit and tcfg is not None) or aux_layers):
        ck, fc = _draft(checkpoint, need_weights, what)
    # 6. fit
    if fit and ck is not None and tcfg is not None:
        check_fit(ck, fc, tcfg, ck.origin or checkpoint, target or target_config)
    # 7. aux layers
    layers = None
    if aux_layers:
        layers = check_aux_layers(aux_layers, engine=engine, ck=ck, fc_key=fc, target_cfg=tcfg)
    return Checked(checkpoint=_abs(checkpoint), target=_abs(target), target_config=_abs(target_config),
                   prompts=_abs(prompts), prompt_records=records, embed_from=_abs(embed_from),
                   previous=_abs(previous), samples=_abs(samples), target_head=_abs(target_head), aux_layers=layers,
                   opened=ck)
