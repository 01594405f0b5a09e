"""The door: every input of a run checked before anything heavy loads, cheapest checks first.

`preflight(Inputs(...), Door(...))` is the one validation layer every front end calls before it
loads a model or runs a notebook (`Inputs`: what the user gave; `Door`: what the front end runs
and how it names its inputs); it returns the same `Inputs` opened: paths absolute where local, the
target's config read (`target_cfg`), the prompt records read and counted (`records`), the draft's
checkpoint open (`opened`) where the door read it. Every later stage takes that object, not the
paths again: the CLI commands (`capture`, `speculate`, `probe`, `doctor`, `diff`, `drift`,
`report`), the report's `validate`, the notebooks' `helpers.ui.notebook.setup()` (on the
parameters cell's values) and the dashboard. It checks, in this order, and stops at the first
problem with one `BadInputError` line naming the input:

1. conflicting flags (`--target` and `--target-config` together) and counts (`--max-prompts 0`);
2. paths (`helpers.io.inputs.input_path`): exists, file or folder as needed, readable, UTF-8 for
   text inputs (prompts, a target config, a server's start-up log); remote locations pass where
   the input may be remote;
3. prompt records (`helpers.io.prompts.prompt_records`, the path checked in 2.): each needs a user
   turn (and an answer when teacher-forced); errors name the line; the records are kept (`records`);
4. the target's config, read once from the folder or the file: present, and not a draft's (a
   draft folder given as `--target`); where the target is loaded, each field the kit reads typed
   (`helpers.model.config_fields`), named when wrong;
5. the draft: a config and weights where the command runs the draft (`need_weights`);
6. draft/target fit from configs and tensor headers only (`helpers.model.fit.check_fit`: vocab,
   hidden size; the mapping's target vocab when the draft has no config);
7. aux layers: a given `--aux-layers` list against the draft's fc width and the target's layers
   (`helpers.model.fit.check_aux_layers`).

The fit checks live with the comparison they refuse on, in `helpers.model.fit` (also
`check_target_fit`, what `speculate` refuses once the pair is loaded, from the files: `report
--target`). Beside `preflight` sits `check_samples`: the samples' capture.json against the draft
scored on them and a given target (`evaluate`, `report`).

Nothing here loads weights beyond `d2t`/`t2d` (and a few embed_tokens rows for the samples'
check), and nothing is written. The drafting settings (`--steps/--topk/--draft-tokens`) are not
checked here: they have one check of their own, with the `Drafting` value they describe.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from helpers.engines.registry import DEFAULT_ENGINE
from helpers.core.errors import BadInputError
from helpers.io.origin import Origin, resolved_path
from helpers.io.inputs import conflicting, input_path
from helpers.io.prompts import prompt_records
from helpers.model.fit import check_aux_layers, check_fit, embed_agreement, mapping_vocab

def _looks_like_draft(cfg: dict) -> bool:
    archs = " ".join(map(str, cfg.get("architectures") or []))
    return ("eagle" in archs.lower() or "speculator" in archs.lower() or "draft_vocab_size" in cfg
            or "speculators_config" in cfg or "transformer_layer_config" in cfg)


def target_config_of(target: str | None, target_config: str | None, *, flag: str = "--target",
                     typed: bool = False) -> dict | None:
    """The target's config.json as a dict (from its folder or the file), refused in one line when
    missing, unreadable or a draft's config. `typed`: each field the kit reads also checked against
    its declaration (`helpers.model.config_fields`), the first wrong one refused by name (where the
    target is loaded; the doctor reports them as findings instead)."""
    from helpers.io.configs import read_config
    from helpers.model.config_fields import check_target_config

    if not target and not target_config:
        return None
    if target and not Origin(target).is_remote and not (Path(target) / "config.json").is_file():
        raise BadInputError(target, f"holds no config.json: {flag} takes a Hugging Face model folder "
                            "(config.json, weights, tokenizer)")
    cfg = read_config(target or target_config)  # the folder's config.json, or the file: one read either way
    where = target or target_config
    if not isinstance(cfg, dict):
        raise BadInputError(where, "the target's config.json is not a JSON object")
    if _looks_like_draft(cfg):
        raise BadInputError(where, f"is a draft checkpoint (architectures {cfg.get('architectures')}), not the target: "
                            f"{flag} takes the target model the draft speculates for")
    if typed:
        shown = Path(where) / "config.json" if target and not Origin(where).is_remote else where
        check_target_config(cfg, shown)
    return cfg


def _draft(checkpoint: str, need_weights: bool, what: str):
    from helpers.io.checkpoint import open_checkpoint
    from helpers.model.config_fields import check_draft_config

    ck = open_checkpoint(checkpoint)
    shown = ck.origin or checkpoint
    fc = ck.tensors.find("fc.weight")
    if need_weights and (ck.config is None or fc is None):
        has_mapping = bool(ck.mapping_files) or ck.tensors.find("d2t") is not None
        lacking = "no config.json" if ck.config is None else "no draft weights (fc.weight)"
        raise BadInputError(shown, f"holds {lacking}: {what} runs the draft, so it needs the whole checkpoint "
                            "(config.json and weights)" + ("; this folder holds only a d2t/t2d mapping, which "
                                                           "inspect and doctor read" if has_mapping else ""))
    if need_weights:  # the draft is built: each config field typed, the first wrong one named
        check_draft_config(ck.config, ck.config_path or shown)
    return ck, fc


@dataclass(frozen=True)
class Inputs:
    """A run's inputs: as the user gave them (paths, the prompt count, the aux layers and the engine
    whose convention reads them), and, once `preflight` returns them, opened: paths absolute where
    local, aux layers checked, and what the door read on the way (`checked` True)."""

    checkpoint: str | None = None
    target: str | None = None
    target_config: str | None = None
    prompts: str | None = None
    max_prompts: int | None = None
    embed_from: str | None = None
    previous: str | None = None
    samples: str | None = None
    target_head: str | None = None
    log: str | None = None  # a server's start-up log (probe --log)
    aux_layers: Sequence[int] | None = None
    engine: str = DEFAULT_ENGINE
    # what the door learnt (set by `preflight`; pass them on: nothing is read twice)
    checked: bool = False
    records: tuple | None = field(default=None, compare=False, repr=False)  # the prompt records (`Conversation`s), read once
    target_cfg: dict | None = field(default=None, compare=False, repr=False)  # the target's config.json, read once
    opened: object = field(default=None, compare=False, repr=False)  # the draft's open `Checkpoint` where the door read it

    @property
    def prompt_records(self) -> int | None:
        """How many prompt records the door read (up to max_prompts); None before the door or without prompts."""
        return None if self.records is None else len(self.records)


@dataclass(frozen=True)
class Door:
    """How a front end's door checks and words its inputs.

    `what` names the front end in refusals; `target_flag` and `max_prompts_flag` are the names it
    gives those inputs (a CLI flag, a positional, a notebook parameter). `need_answer`: each prompt
    record needs an answer (teacher-forced capture). `need_weights`: the front end runs the draft,
    so its config and weights must be there. `target_is_model`: the target is loaded with
    transformers (capture, speculate, a report's notebook 07): a local folder; otherwise (doctor) it
    may be remote, and only its config is read. `fit=False`: the draft/target fit is left to the
    caller (the doctor reports it as findings)."""

    what: str = "this command"
    target_flag: str = "--target"
    max_prompts_flag: str = "--max-prompts"
    need_answer: bool = False
    need_weights: bool = False
    target_is_model: bool = True
    fit: bool = True


def preflight(given: Inputs, door: Door = Door()) -> Inputs:
    """Check a run's inputs at the door (see the module docstring); returns them opened."""
    target_flag, max_prompts, max_prompts_flag = door.target_flag, given.max_prompts, door.max_prompts_flag
    # 1. flags that contradict each other, counts
    conflicting({target_flag: given.target, "--target-config": given.target_config},
                "both name the target's config (the folder's config.json, or the file): give one")
    if max_prompts is not None and int(max_prompts) < 1:
        raise BadInputError(None, f"{max_prompts_flag} must be at least 1, got {max_prompts}")
    # 2. paths, cheapest first
    checkpoint = input_path(given.checkpoint, "file or folder", remote_ok=True)  # as open_checkpoint says it
    target = input_path(given.target, "target folder", kind="folder", remote_ok=not door.target_is_model,
                        flag=target_flag)
    target_config = input_path(given.target_config, "target config", text=True, remote_ok=True, flag="--target-config")
    log = input_path(given.log, "log file", kind="file", text=True, flag="--log")
    prompts = input_path(given.prompts, "prompt file", kind="file", text=True, flag="--prompts")
    embed_from = input_path(given.embed_from, "embed_tokens file or folder", remote_ok=True, flag="--embed-from")
    previous = input_path(given.previous, "previous checkpoint", remote_ok=True, flag="--previous")
    samples = input_path(given.samples, "samples folder", kind="folder", flag="--samples")
    target_head = input_path(given.target_head, "target head (file or folder)", remote_ok=True, flag="--target-head")
    # 3. prompt records (the path checked above: read once, kept)
    records = (prompt_records(prompts, max_prompts, need_answer=door.need_answer, flag=max_prompts_flag)
               if prompts else None)
    # 4. the target's config
    tcfg = target_config_of(target, target_config, flag=target_flag, typed=door.target_is_model)
    # 5. the draft
    ck = fc = None
    if checkpoint and (door.need_weights or (door.fit and tcfg is not None) or given.aux_layers):
        ck, fc = _draft(checkpoint, door.need_weights, door.what)
    # 6. fit
    if door.fit and ck is not None and tcfg is not None:
        check_fit(ck, fc, tcfg, ck.origin or checkpoint, target or target_config)
    # 7. aux layers
    layers = None
    if given.aux_layers:
        layers = check_aux_layers(given.aux_layers, engine=given.engine, ck=ck, fc_key=fc, target_cfg=tcfg)
    return replace(given, checkpoint=resolved_path(checkpoint), target=resolved_path(target),
                   target_config=resolved_path(target_config), prompts=resolved_path(prompts), records=records,
                   embed_from=resolved_path(embed_from), previous=resolved_path(previous),
                   samples=resolved_path(samples), target_head=resolved_path(target_head), log=resolved_path(log),
                   aux_layers=layers, checked=True, target_cfg=tcfg, opened=ck)


# -- samples against the draft and the target they claim (their capture.json) -------------------------
SAME_EMBED = 0.5  # mean cosine of sampled embed_tokens rows below which the draft's embedding is another target's


def _named_aux(cfg: dict) -> list[int] | None:
    eagle = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    for ids in (eagle.get("eagle_aux_hidden_state_layer_ids"), cfg.get("eagle_aux_hidden_state_layer_ids")):
        if isinstance(ids, list) and ids and all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            return [int(i) for i in ids]
    return None


def _manifest_target(m) -> Path | None:
    """The local folder of the target the manifest names (as written, relative to the working folder
    or to a folder above the manifest, where `capture` ran), or None when it is not at hand."""
    if m.target_path is None or Origin(m.target_path).is_remote:
        return None
    p = Path(m.target_path)
    for base in ([Path.cwd()] if not p.is_absolute() else [Path("/")]) + list(m.path.resolve().parents):
        q = base / p
        if (q / "config.json").is_file():
            return q
    return None


def _sha(path: Path) -> str | None:
    from helpers.io.prompts import file_sha256

    try:
        return file_sha256(path)
    except OSError:
        return None


def check_samples(checkpoint, samples, *, draft_config=None, target=None, opened=None,
                  target_flag: str = "--target") -> list:
    """The samples' capture manifests (`capture.json`) against the draft that will be scored on
    them and the target given: one `BadInputError` line naming the manifest, what it says and what
    the draft expects, when the samples were captured from another target. Checked: the target's
    hidden size and vocab against the draft's (config target_hidden_size / vocab_size, else the
    mapping's), the captured layers against the draft's aux-layer ids (either engine convention,
    as given or plus one), the draft's embed_tokens against the named target's (when that folder
    is at hand and is the one captured, by its config hash), and a given target's config hash
    against the manifest's. Samples without a manifest pass unchecked; returns the manifests."""
    from helpers.io.checkpoint import open_checkpoint
    from helpers.io.configs import flat_config, read_config, vocab_sizes
    from helpers.io.samples import read_manifests

    manifests = read_manifests(samples)
    if not manifests or checkpoint is None:
        return manifests
    ck = opened if opened is not None else open_checkpoint(checkpoint)
    shown = ck.origin or str(checkpoint)
    cfg = read_config(draft_config) if draft_config else (ck.config or {})
    flat = flat_config(cfg) if isinstance(cfg, dict) else {}
    h = flat.get("target_hidden_size") or flat.get("hidden_size")
    h = h if isinstance(h, int) and not isinstance(h, bool) and h > 0 else None
    vocab = vocab_sizes(flat)[1] or mapping_vocab(ck)
    ids = _named_aux(flat)
    local = target and not Origin(target).is_remote and (Path(target) / "config.json").is_file()
    given_sha = _sha(Path(target) / "config.json") if local else None
    expects = ", ".join(x for x in (None if h is None else f"H {h:,}", None if vocab is None else f"vocab {vocab:,}",
                                    None if ids is None else f"aux layers {ids}") if x) or "nothing it states"
    for m in manifests:
        aux = "" if m.aux_layer_ids is None else f"; aux layers {list(m.aux_layer_ids)}" + (
            "" if m.captured_layers is None else f", captured {list(m.captured_layers)}")
        says = f"says the samples were captured from {m.describe()}{aux}"
        wrong = []
        if m.hidden_size is not None and h is not None and m.hidden_size != h:
            wrong.append(f"hidden size {m.hidden_size:,} vs the draft's {h:,}")
        if m.vocab_size is not None and vocab is not None and m.vocab_size != vocab:
            wrong.append(f"vocab {m.vocab_size:,} vs the draft's {vocab:,}")
        if ids is not None and m.captured_layers is not None and list(m.aux_layer_ids or ()) != ids \
                and list(m.captured_layers) not in (ids, [i + 1 for i in ids]):
            wrong.append(f"captured layers {list(m.captured_layers)}, where the draft's aux ids {ids} mean "
                         f"{ids} or {[i + 1 for i in ids]}")
        if given_sha and m.target_config_sha256 and given_sha != m.target_config_sha256:
            wrong.append(f"{target_flag} {target}'s config.json has another SHA-256 than the target_config_sha256 "
                         "the manifest records")
        if not wrong:
            where = _manifest_target(m)
            same = where is not None and m.target_config_sha256 in (None, _sha(where / "config.json"))
            if same:  # the folder captured (by its config hash): the draft's embedding should be its
                agree = embed_agreement(ck, where)
                if agree is not None and agree[0] < SAME_EMBED:
                    wrong.append(f"the draft's embed_tokens is not {m.target_path}'s (mean cosine {agree[0]:.2f} over "
                                 f"{agree[1]} rows; a draft of that target shares its embedding)")
        if wrong:
            head = (f"{says}, but {target_flag} {target} is not that target" if len(wrong) == 1 and given_sha
                    and wrong[0].startswith(target_flag) else f"{says}, but the draft {shown} expects {expects}")
            raise BadInputError(m.path, f"{head}: " + "; ".join(wrong) + ": the samples come from another target, so "
                                "scores on them say nothing about this draft (score it on samples captured from its "
                                "own target: d2t-lab capture)")
    return manifests
