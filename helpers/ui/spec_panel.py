"""The dashboard's "speculate" mode: a target picker, a prompt box, and the token view streamed
live while the kit's loop (`helpers.speculate.loop`) decodes the prompt under two readings of d2t.

`SpeculatePanel` owns its controls (target, prompt, new tokens, the chain's drafted tokens and the
engine whose aux-layer convention feeds the draft) and the live view; `Dashboard` (helpers.ui.widgets)
shows them in speculate mode and calls `run(...)` from its Run button. The run's settings come from
`helpers.speculate.builder.spec_settings`, as for every front end: the same default shape (a chain
of 5) and the engine chosen here honoured. Loaded targets and drafts are kept
between runs (keyed by path, device and dtype), so a second Run only decodes. Every number comes
from `helpers.speculate.loop`; the panel only collects arguments and lays out what it returns.
"""
from __future__ import annotations

import html
from pathlib import Path

import ipywidgets as W

from helpers.core.errors import BadInputError
from helpers.ui.token_view import LiveTokenView

DEFAULT_PROMPT = "Construct a new Decimal object. 'value' can be an integer, string, tuple,"


def find_targets(root: Path) -> list[Path]:
    """Hugging Face model folders (config.json and a tokenizer) up to two levels under `root`."""
    if not root.is_dir():
        return []
    found = sorted(root.glob("*/config.json")) + sorted(root.glob("*/*/config.json"))
    return [c.parent for c in found if any((c.parent / f).is_file() for f in ("tokenizer.json", "tokenizer.model"))]


class SpeculatePanel:
    def __init__(self, target: str | None = None, prompt: str | None = None, max_new_tokens: int = 32,
                 drafted: int | None = None, engine: str | None = None):
        from helpers.engines.registry import ENGINES, aux_convention
        from helpers.speculate.builder import spec_drafting, spec_engine

        style = {"description_width": "110px"}
        wide = W.Layout(width="460px")
        self.target = W.Combobox(description="target", value=target or "", placeholder="Hugging Face target folder",
                                 ensure_option=False, continuous_update=False, style=style, layout=wide)
        self.prompt = W.Textarea(description="prompt", value=DEFAULT_PROMPT if prompt is None else prompt,
                                 style=style, layout=W.Layout(width="460px", height="70px"))
        self.max_new_tokens = W.BoundedIntText(value=max_new_tokens, min=1, max=4096, description="new tokens",
                                               style=style, layout=W.Layout(width="240px"))
        self.drafted = W.BoundedIntText(value=spec_drafting(drafted).steps, min=1, max=16, description="drafted tokens",
                                        style=style, layout=W.Layout(width="240px"),
                                        tooltip="a chain of K drafted tokens (vLLM --num-speculative-tokens K)")
        engine = spec_engine(engine)
        engines = tuple(e for e in ENGINES if aux_convention(e) is not None)
        self.engine = W.Dropdown(options=engines + ((engine,) if engine not in engines else ()), value=engine,
                                 description="engine", style=style, layout=W.Layout(width="240px"),
                                 tooltip="whose aux-layer convention feeds the draft")
        self.controls = W.VBox([self.target, self.prompt, W.HBox([self.max_new_tokens, self.drafted]), self.engine])
        self.controls.add_class("d2t-speculate-controls")
        self.live = W.VBox()
        self.live.add_class("d2t-live")
        self.runs: dict = {}  # reading -> SpecRun of the last run
        self.view: LiveTokenView | None = None
        self._cache: dict = {}

    def rescan(self, root: Path) -> None:
        self.target.options = tuple(str(p) for p in find_targets(root))

    def _load(self, checkpoint: str, target: str, device, dtype, embed_from):
        from helpers.model.pair import load_pair
        from helpers.model.target import check_speculation_target, load_target

        key = ("target", target, device, dtype)
        if key not in self._cache:
            check_speculation_target(target)  # a family the loop cannot run: one line, before loading
            self._cache = {k: v for k, v in self._cache.items() if k[0] != "target"}  # one target at a time
            self._cache[key] = load_target(target, device=device, dtype=dtype)
        tgt = self._cache[key]
        dkey = ("draft", checkpoint, str(tgt.device), str(tgt.dtype), embed_from)
        if dkey not in self._cache:
            self._cache[dkey] = load_pair(tgt, checkpoint, embed_from=embed_from)[1]
        return tgt, self._cache[dkey]

    def settings(self, reading: str = "offset"):
        """The run's `SpecSettings` from the controls, built by the one builder (`spec_settings`)."""
        from helpers.speculate.builder import spec_settings

        return spec_settings(int(self.drafted.value), engine=self.engine.value, reading=reading,
                             max_new_tokens=int(self.max_new_tokens.value))

    def run(self, checkpoint: str, *, device=None, dtype=None, embed_from=None, reading: str = "offset") -> str:
        """Decode the prompt under `reading` and one other reading, streaming the token view;
        returns the HTML headline for the output area."""
        from dataclasses import replace

        from helpers.io.chat import prompt_ids, uses_template
        from helpers.speculate.loop import speculate

        target = self.target.value.strip()
        if not target:
            raise BadInputError(None, "choose a target first (speculate mode verifies the draft with it)")
        if not self.prompt.value.strip():
            raise BadInputError(None, "type a prompt first")
        settings = self.settings(reading)  # checked before anything loads
        tgt, draft = self._load(checkpoint, str(Path(target).expanduser()), device, dtype, embed_from)
        readings = ["none"] if draft.d2t is None else [reading] + [r for r in ("offset", "absolute") if r != reading][:1]
        self.view = view = LiveTokenView(readings, title="how each token was generated (live)")
        self.live.children = (view.widget,)
        tok = tgt.tokenizer
        ids = prompt_ids(tok, [{"role": "user", "content": self.prompt.value}], uses_template(tok, "auto"))
        self.runs = {}
        for r in readings:
            run = speculate(tgt, draft, [ids], replace(settings, reading=r),
                            on_round=lambda p, r=r: view.update(r, p, tok))
            view.update(r, run.prompts[0], tok)
            self.runs[r] = run
        return "<br>".join(f"<b>{html.escape(r)}</b> reading: accept length <b>{run.mean:.2f}</b> over "
                           f"{run.verify_steps} verify steps, {run.forwards_per_token:.2f} target forwards per token "
                           f"({html.escape(str(tgt.device))}, {html.escape(str(tgt.dtype).removeprefix('torch.'))})"
                           for r, run in self.runs.items())
