"""Capture EAGLE-3 hidden states from a target into SpecForge's offline layout.

For each prompt-file record the conversation is tokenized (the tokenizer's chat template when it
has one; `loss_mask` 1 exactly on assistant tokens, `helpers.io.chat`). With `regenerate` the
assistant part is the target's own greedy continuation of the prompt (what an engine will verify
drafts against); otherwise the record's answer is teacher-forced. One forward of the whole
sequence then records the aux hidden states (the inputs of the layers the chosen engine feeds
the draft) and the last hidden state after the final norm (`HiddenStateCapture`).

Output: `OUT/rows_{g}-{g+64}/data_{i}.ckpt` (i = the record's index; the dict `helpers.io.samples`
reads; states stored in bf16 like SpecForge's files) and `OUT/capture.json`, the manifest. A run
is resumable: records whose file exists are skipped, each file is written under a temporary
name and renamed, and a folder holding a capture with other settings is refused. Memory is
bounded by one batch: the prompt file is streamed.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from helpers.core.distributed import SINGLE, Ranks, barrier, sum_counts
from helpers.engines.registry import DEFAULT_ENGINE, aux_convention, aux_engines
from helpers.core.errors import BadInputError
from helpers.io.chat import encode_conversation, prompt_ids, uses_template
from helpers.io.prompts import Conversation, check_prompts, file_sha256, read_prompts
from helpers.io.samples import sample_path, write_sample
from helpers.model.target import (
    HiddenStateCapture,
    Target,
    describe,
    draft_aux_ids,
    draft_mismatches,
)

STORAGE_DTYPE = torch.bfloat16
MANIFEST = "capture.json"
# settings that decide what the files hold: a resumed run must agree on all of them
_CONTENT_KEYS = ("target_config_sha256", "prompts_sha256", "engine", "captured_layers", "regenerate",
                 "max_new_tokens", "chat_template", "dtype", "max_samples")


@dataclass(frozen=True)
class CaptureSettings:
    """What a capture's files hold (a resumed run must agree on them, `_CONTENT_KEYS`): the engine
    whose aux-layer convention is captured, the aux ids (`aux_layers`; else the draft's config, else
    the engine's default), the draft they are read from and checked against, the assistant part
    (`regenerate`: the target's greedy continuation of up to `max_new_tokens`; else the record's
    answer, teacher-forced), the chat template (`chat_template`: auto or none) and the
    records captured (`max_samples`: the first N; None: all)."""

    engine: str = DEFAULT_ENGINE
    aux_layers: Sequence[int] | None = None
    draft: str | os.PathLike | None = None
    regenerate: bool = False
    max_new_tokens: int = 256
    chat_template: str = "auto"
    max_samples: int | None = None


@dataclass
class CaptureResult:
    out: Path
    manifest: dict
    written: int = 0
    skipped: int = 0
    tokens: int = 0
    files: list[Path] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"out": os.fspath(self.out), "written": self.written, "skipped": self.skipped,
                "tokens": self.tokens, "manifest": self.manifest}

    def report(self) -> str:
        m = self.manifest
        return "\n".join([
            f"capture: {self.written} sample(s) written, {self.skipped} already there, {self.tokens:,} tokens -> {self.out}",
            f"  target {m['target']['path']} ({m['target']['num_layers']} layers, H {m['target']['hidden_size']}), "
            f"{m['engine']} convention: aux = inputs of layers {m['captured_layers']} "
            f"(ids {m['aux_layer_ids']}, {m['aux_ids_source']})",
            f"  assistant part: {'the target’s own greedy continuation' if m['regenerate'] else 'the dataset’s answer, teacher-forced'}"
            f"; chat template: {'used' if m['template_used'] else 'none'}",
        ])


def _manifest(target: Target, prompts: Path, settings: CaptureSettings, ids, ids_source: str, layers,
              template: bool, records: int) -> dict:
    """The manifest (`capture.json`): the settings, the aux ids resolved (and where they came from),
    the layers captured, whether the chat template was used and the records read."""
    tok = target.tokenizer
    tmpl = getattr(tok, "chat_template", None) if template else None
    return {
        "format": "specforge-offline",
        "target": describe(target) | {"device": None},
        "target_config_sha256": file_sha256(target.path / "config.json"),
        "tokenizer": {"class": type(tok).__name__, "vocab_size": len(tok) if tok is not None else None,
                      "chat_template_sha256": hashlib.sha256(tmpl.encode()).hexdigest() if tmpl else None},
        "prompts": os.fspath(prompts), "prompts_sha256": file_sha256(prompts), "records": records,
        "engine": settings.engine, "aux_layer_ids": ids, "aux_ids_source": ids_source, "captured_layers": layers,
        "final_state": "output of the final norm (SpecForge's hidden_state)",
        "regenerate": settings.regenerate, "max_new_tokens": settings.max_new_tokens,
        "chat_template": settings.chat_template,
        "template_used": template, "dtype": str(target.dtype).removeprefix("torch."),
        "storage_dtype": str(STORAGE_DTYPE).removeprefix("torch."), "max_samples": settings.max_samples,
        "draft": os.fspath(settings.draft) if settings.draft else None,
    }


def _check_resume(out: Path, manifest: dict) -> None:
    """A folder holding samples of a capture with other settings is refused; a manifest with no
    sample beside it (a run that failed before writing one) binds nothing and is replaced."""
    f = out / MANIFEST
    if not f.is_file() or not any(out.glob("rows_*/data_*.ckpt")):
        return
    try:
        old = json.loads(f.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise BadInputError(f, f"cannot be read as a capture manifest ({e})") from None
    diff = [k for k in _CONTENT_KEYS if old.get(k) != manifest.get(k)]
    if diff:
        raise BadInputError(out, f"holds a capture made with other settings ({', '.join(diff)} differ): "
                            "choose another -o folder or remove this one")


def _batches(records: Iterator[Conversation], out: Path, size: int, ranks: Ranks,
             skipped: list) -> Iterator[list[Conversation]]:
    """Batch k holds records k*size .. k*size+size-1 (fixed, so a resumed or sharded run computes
    every sample in the same batch as a whole run: the same numbers); it is rank k % world's, and
    skipped when all its files exist."""
    def emit(batch, k):
        if not ranks.takes(k):
            return
        done = [rec.index for rec in batch if sample_path(out, rec.index).is_file()]
        if len(done) == len(batch):
            skipped.extend(done)
            return
        yield batch

    batch, k = [], 0
    for rec in records:
        batch.append(rec)
        if len(batch) == size:
            yield from emit(batch, k)
            batch, k = [], k + 1
    if batch:
        yield from emit(batch, k)


def _pad(seqs: list[list[int]], pad: int, left: bool) -> tuple[torch.Tensor, torch.Tensor]:
    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), pad, dtype=torch.int64)
    att = torch.zeros((len(seqs), n), dtype=torch.int64)
    for r, s in enumerate(seqs):
        sl = slice(n - len(s), n) if left else slice(0, len(s))
        ids[r, sl] = torch.tensor(s, dtype=torch.int64)
        att[r, sl] = 1
    return ids, att


@torch.inference_mode()
def _generate(target: Target, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    """The target's greedy continuation of each prompt (stopping after an end-of-sequence token)."""
    tok = target.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    ids, att = _pad(prompts, pad, left=True)
    dev = target.input_device
    out = target.model.generate(input_ids=ids.to(dev), attention_mask=att.to(dev), do_sample=False,
                                max_new_tokens=max_new_tokens, pad_token_id=pad, temperature=None, top_p=None,
                                top_k=None)
    eos = tok.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos]) - {None}
    new = []
    for row in out[:, ids.shape[1]:].tolist():
        gen = []
        for t in row:
            gen.append(t)
            if t in eos:
                break
        new.append(gen)
    return new


def _sequences(target: Target, batch: list[Conversation], template: bool, regenerate: bool,
               max_new_tokens: int, prompts: Path) -> list[tuple[list[int], list[int]]]:
    tok = target.tokenizer
    if not regenerate:
        for rec in batch:
            if not rec.has_answer:
                raise BadInputError(prompts, f"line {rec.line}: the record has no assistant answer to teacher-force "
                                    "(pass --regenerate to let the target answer)")
        return [encode_conversation(tok, rec.messages, template) for rec in batch]
    heads = [prompt_ids(tok, rec.prompt_messages(), template) for rec in batch]
    tails = _generate(target, heads, max_new_tokens)
    return [(h + t, [0] * len(h) + [1] * len(t)) for h, t in zip(heads, tails)]


@torch.inference_mode()
def _forward(target: Target, cap: HiddenStateCapture, seqs: list[list[int]]):
    pad = target.tokenizer.pad_token_id if target.tokenizer.pad_token_id is not None else 0
    ids, att = _pad(seqs, pad, left=False)
    dev = target.input_device
    cap.clear()
    target.decoder(input_ids=ids.to(dev), attention_mask=att.to(dev), use_cache=False)
    return cap.aux(), cap.last()


def resolve_aux_ids(aux_layers, draft, engine: str) -> tuple[list[int] | None, str]:
    """The configured aux ids to use and where they came from: --aux-layers, the draft, the default."""
    if aux_layers:
        return [int(i) for i in aux_layers], "--aux-layers"
    if draft is not None and not (isinstance(draft, str) and not draft):
        ids = draft_aux_ids(draft, engine)
        if ids:
            return ids, "the draft's config"
    return None, "engine default (2, L//2, L-3)"


def capture(target: Target, prompts, out, settings: CaptureSettings = CaptureSettings(), *, batch_size: int = 8,
            progress: bool = False, ranks: Ranks = SINGLE) -> CaptureResult:
    """Capture hidden states for the records of `prompts` into `out` (see the module docstring), as
    `settings` say; `batch_size` records per forward, a progress bar with `progress`.

    Under torchrun (`ranks`), batch k is rank k % world's; every rank writes its own files into
    the shared `out`, rank 0 the manifest, and the counts are summed over ranks."""
    engine, draft, regenerate = settings.engine, settings.draft, settings.regenerate
    max_new_tokens, max_samples = settings.max_new_tokens, settings.max_samples
    prompts, out = Path(prompts), Path(out)
    try:
        known = aux_convention(engine) is not None
    except ValueError as e:
        raise BadInputError(None, f"--engine: {e}") from None
    if not known:
        raise BadInputError(None, f"--engine must name an engine whose aux-layer convention the kit has read "
                            f"({', '.join(aux_engines())}) for a capture, got {engine!r}")
    if batch_size < 1 or max_new_tokens < 1:
        raise BadInputError(None, "--batch-size and --max-new-tokens must be at least 1")
    if draft:
        bad = draft_mismatches(target, draft)
        if bad:
            raise BadInputError(draft, "does not fit the target " + os.fspath(target.path) + ": " + "; ".join(bad))
    ids, source = resolve_aux_ids(settings.aux_layers, draft, engine)
    layers = target.aux_layers(engine, ids)
    template = uses_template(target.tokenizer, settings.chat_template)
    records = check_prompts(prompts, max_samples, need_answer=not regenerate, flag="--max-prompts")
    manifest = _manifest(target, prompts, settings, ids, source, layers, template, records)
    if out.exists() and not out.is_dir():
        raise BadInputError(out, "exists and is not a folder")
    if out.is_dir() and not (out / MANIFEST).is_file() and any(out.iterdir()):
        raise BadInputError(out, "holds other files and no capture.json: choose a new or empty folder "
                            "(a capture never writes among someone else's files)")
    _check_resume(out, manifest)
    if ranks.main:
        out.mkdir(parents=True, exist_ok=True)
        for stale in out.glob("rows_*/*.tmp"):  # left by a run killed while writing
            stale.unlink()
        tmp = out / (MANIFEST + ".tmp")  # atomic: another rank may be reading it
        tmp.write_text(json.dumps(manifest, indent=2) + "\n")
        os.replace(tmp, out / MANIFEST)
    barrier(ranks)
    result = CaptureResult(out, manifest)
    skipped: list[int] = []
    from tqdm.auto import tqdm

    bar = tqdm(total=-(-records // ranks.world), desc="capture", unit="sample", disable=not (progress and ranks.main))
    with HiddenStateCapture(target, layers) as cap:
        for batch in _batches(read_prompts(prompts, max_samples), out, batch_size, ranks, skipped):
            seqs = _sequences(target, batch, template, regenerate, max_new_tokens, prompts)
            aux, last = _forward(target, cap, [s for s, _ in seqs])
            for r, (rec, (s, m)) in enumerate(zip(batch, seqs)):
                path = sample_path(out, rec.index)
                if path.is_file():  # finished before an interruption: kept as it is
                    skipped.append(rec.index)
                    continue
                T = len(s)
                write_sample(path, torch.tensor(s), torch.tensor(m), last[r, :T].to(STORAGE_DTYPE),
                             aux[r, :T].to(STORAGE_DTYPE))
                result.files.append(path)
                result.tokens += T
                result.written += 1
            bar.n = result.written + len(skipped)
            bar.refresh()
    bar.close()
    result.written, result.skipped, result.tokens = (int(x) for x in sum_counts(
        [result.written, len(skipped), result.tokens], ranks))
    return result
