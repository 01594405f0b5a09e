"""The findings registry: one declaration per finding code, which the doctor, `fix` and the docs read.

An `Entry` says, for one code: the severities it is reported at, the engines it may speak of alone
(None: any engine checked, or all of them at once), the effect keys it names in the engine outcome
tables of `helpers.engines.table` besides `CODE.SEVERITY` (how `Finding` picks its predicted
outcome), the general fix, one line of doc text, where the behaviour was read (a public issue or PR,
or an engine file), and for `d2t-lab fix` what it repairs and what it would need that it cannot supply.

`Finding` refuses a code without an entry, a severity, effect or engine its entry does not declare, so a
code not declared here cannot be emitted. Adding a finding: its checker, its entry here, its test
(tests/test_findings_registry.py checks both ways). docs/doctor-findings.md's "Every finding" table is
rendered from here: `python -m helpers.doctor.registry docs/doctor-findings.md` rewrites it.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

SEVERITIES = ("error", "warning", "info")
# The effect of a finding that changes nothing by itself in how an engine serves (what it points at is
# said per engine by another finding): it never leaves a prediction incomplete.
NO_EFFECT = "none"
VLLM_ONLY = ("vllm",)


@dataclass(frozen=True)
class Entry:
    """One finding code's declaration."""

    code: str
    severities: tuple[str, ...]
    doc: str  # one line: what the finding says
    fix: str  # the general fix (each finding's own fix line names the values at hand)
    source: str  # where the behaviour was read: public issue / PR, or engine file
    engines: tuple[str, ...] | None = None  # the engine keys it may speak of alone; None: any (or all)
    effects: tuple[str, ...] = ()  # outcome-table keys besides CODE.SEVERITY
    repairs: str | None = None  # what `d2t-lab fix` changes that resolves it
    cannot_repair: str | None = None  # what `d2t-lab fix` would need that it cannot supply

    @property
    def effect_keys(self) -> tuple[str, ...]:
        """Every outcome-table key a finding of this code may name."""
        return tuple(f"{self.code}.{s}" for s in self.severities) + self.effects

    def problem(self, severity: str, effect: str | None, engine: str | None) -> str | None:
        """What a finding of this code with these fields breaks in the declaration, or None."""
        # an error every engine asked serves as trained is reported as a warning (`Finding.with_outcomes`)
        if severity not in self.severities and not (severity == "warning" and "error" in self.severities):
            return f"severity {severity!r} is not declared (declared: {', '.join(self.severities)})"
        if effect not in (None, NO_EFFECT) and effect not in self.effect_keys:
            return f"effect {effect!r} is not declared (declared: {', '.join(self.effects) or 'none'})"
        if engine is not None and self.engines is not None and engine not in self.engines:
            return f"engine {engine!r} is not declared (declared: {', '.join(self.engines)})"
        return None


def _e(code, severities, doc, fix, source, **kw) -> Entry:
    return Entry(code, tuple(severities.split("/")), doc, fix, source, **kw)


_NEEDS_D2T = "needs the producer's d2t tensor"
_ENTRIES = [
    # -- the mapping (checks_mapping) ------------------------------------------------------------------
    _e("vocab-size-mismatch", "error", "the draft, target, d2t, t2d and lm_head vocab sizes disagree, or "
       "draft_vocab_size is missing while the head is reduced", "state vocab_size and draft_vocab_size in config.json "
       "as the weights hold them", "SGLang / vLLM `llama_eagle3.py`: lm_head sized from draft_vocab_size, else "
       "vocab_size", effects=("vocab-size-mismatch.configs", "vocab-size-mismatch.config-draft",
                             "vocab-size-mismatch.target"),
       repairs="adds draft_vocab_size to config.json when it is missing",
       cannot_repair="needs config.json sizes that match the weights"),
    _e("d2t-invalid", "error", "d2t cannot be a mapping (dtype, shape, values) under either reading",
       "re-export d2t from the producer's vocab mapping (int64 offsets, target = i + d2t[i])",
       "SGLang `eagle_worker.py` hot_token_id, vLLM `llama_eagle3.py` draft_id_to_target_id",
       effects=("d2t-invalid.float",), cannot_repair=_NEEDS_D2T),
    _e("d2t-absolute", "error/warning", "d2t holds absolute target ids where every engine reads offsets "
       "(target = i + d2t[i]); a warning when no t2d decides", "d2t-lab fix converts it to offsets "
       "(d2t - arange(N))", "SGLang `eagle_worker.py` (hot_token_id = d2t + arange), vLLM `llama_eagle3.py`",
       effects=("d2t.past-vocab", "d2t.wrong-ids"), repairs="converts absolute ids to offsets (d2t - arange(N))"),
    _e("t2d-mismatch", "error", "t2d does not match d2t read as offsets (or is not bool [target_vocab])",
       "rebuild t2d from the offsets (t2d[arange(N) + d2t] = True) or take both from the same export",
       "SpecForge / speculators exports (t2d is never read by the engines)", effects=("t2d-mismatch.t2d-broken",),
       cannot_repair="needs the t2d exported with this d2t"),
    _e("d2t-missing", "error/warning", "no d2t with a reduced draft vocab (or d2t only in a side file the engines "
       "never read)", "export d2t into the weights (d2t-lab fix copies a side file's in)",
       "SGLang `eagle_worker.py` (draft id i proposed as target id i), vLLM `llama_eagle3.py` (zeros)",
       repairs="copies d2t/t2d from a side file into the weights", cannot_repair=_NEEDS_D2T),
    _e("d2t-absent-full-vocab", "info", "no d2t, and the draft keeps the full target vocab: the identity mapping "
       "is right", "nothing to do", "vLLM `llama_eagle3.py` (d2t only when the vocab sizes differ)"),
    _e("config-engine", "error", "config.json as an engine that builds the draft's config with transformers reads "
       "it: a field of the wrong type or null where the class types it, a size left out whose default the weights do "
       "not fit, num_hidden_layers left out, use_aux_hidden_state off", "write the fields as the trained draft's "
       "config has them", "vLLM `get_config` (transformers AutoConfig, strict field types in transformers 5), "
       "`llama_eagle3.py`; llama.cpp's converter (rule config.converter); rule config.reader",
       engines=("vllm", "llamacpp"), effects=("layers.random", "aux.no-aux-states", "aux.no-aux-states-normed")),
    _e("d2t-full-vocab", "error", "a d2t stored in a draft that keeps the full target vocab, where the release "
       "builds no mapping parameter for one (rule d2t.param): it refuses to start",
       "drop d2t / t2d from the full-vocab export, or set draft_vocab_size to the reduced vocab the head was trained "
       "on", "vllm#53458 (`llama_eagle3.py`: draft_id_to_target_id only when draft_vocab_size differs from "
       "vocab_size); rule d2t.param", engines=VLLM_ONLY, repairs=None),
    _e("d2t-arange", "error", "d2t equals arange(N): as offsets it sends draft id i to target id 2i",
       "re-export d2t as offsets from the producer's mapping", "SGLang / vLLM offsets reading",
       effects=("d2t.wrong-ids", "d2t.past-vocab"), cannot_repair=_NEEDS_D2T),
    _e("d2t-identity-reduced-vocab", "error", "d2t is all zeros with a reduced vocab: draft id i is proposed as "
       "target id i", "re-export d2t from the producer's mapping", "SGLang `eagle_worker.py` hot_token_id",
       cannot_repair=_NEEDS_D2T),
    _e("d2t-unverified", "warning/info", "d2t cannot be checked: all zeros with an unknown target vocab, or no "
       "t2d and both readings give distinct in-range ids (offsets assumed)", "add vocab_size to config.json; ship "
       "t2d with the checkpoint", "the kit's `VocabMapping.verdict`"),
    # -- a llama.cpp draft GGUF (checks_gguf) ---------------------------------------------------------------
    _e("gguf-d2t-offsets", "error", "a GGUF's d2t holds offsets where llama.cpp reads absolute target ids (its "
       "converter writes d2t + arange(N)): llama.cpp proposes wrong tokens", "d2t-lab fix SRC.gguf DST.gguf writes "
       "absolute ids, or convert again with convert_hf_to_gguf.py --target-model-dir TARGET",
       "llama.cpp conversion/llama.py (d2t + arange, I64) + src/models/eagle3.cpp (d2t read as target ids)",
       engines=("llamacpp",), effects=("d2t.wrong-ids",),
       repairs="writes a GGUF with absolute ids (d2t + arange(N)), every other key and tensor copied"),
    # what llama.cpp's loader and draft graph refuse in a GGUF (an HF checkpoint meets the converter first)
    _e("gguf-d2t-type", "error", "a GGUF's d2t is not stored as I64: llama.cpp's draft graph asserts I64 and the "
       "server does not start", "convert again from the HF checkpoint (the converter writes d2t as I64)",
       "llama.cpp src/models/eagle3.cpp (GGML_ASSERT(model.d2t->type == GGML_TYPE_I64)); engine-truth rows "
       "`gguf-d2t-f32`, `gguf-d2t-bf16`", engines=("llamacpp",), cannot_repair="needs d2t written as I64 ids"),
    _e("gguf-d2t-range", "error", "a GGUF's d2t names an id outside the target vocab: llama.cpp stops at start-up "
       "scattering the draft logits", "convert again from the HF checkpoint with its target",
       "llama.cpp src/models/eagle3.cpp (ggml_set_rows through d2t) + ggml-cpu ops.cpp (GGML_ASSERT(i1 >= 0 && "
       "i1 < ne1)); engine-truth row `gguf-d2t-past-vocab`", engines=("llamacpp",), cannot_repair=_NEEDS_D2T),
    _e("gguf-head-rows", "error", "a GGUF's output.weight rows differ from d2t's length (the draft vocab llama.cpp "
       "takes): its loader refuses the head's shape", "convert again from an HF checkpoint whose lm_head and d2t "
       "belong together", "llama.cpp src/models/eagle3.cpp load_arch_tensors (output sized from d2t); "
       "engine-truth row `gguf-output-short`", engines=("llamacpp",),
       cannot_repair="needs the lm_head exported with this d2t"),
    _e("gguf-target-layers", "error", "a GGUF without eagle3.target_layers: llama.cpp's loader requires the key "
       "(no default; the converter writes one)", "convert again, or write the three trained layer ids into "
       "eagle3.target_layers", "llama.cpp src/models/eagle3.cpp load_arch_hparams (\"requires 'extract_layers'\"); "
       "engine-truth row `gguf-target-layers-missing`", engines=("llamacpp",),
       cannot_repair="needs the aux layer ids the draft was trained on"),
    _e("gguf-enc-norm-missing", "error", "a GGUF with eagle3.norm_before_fc true and no enc_output_norm.weight: "
       "llama.cpp's loader requires the norm", "set norm_before_fc false (a draft trained without input_norm), or "
       "convert again from a checkpoint that stores input_norm.weight", "llama.cpp src/models/eagle3.cpp "
       "load_arch_tensors (enc.output_norm created when norm_before_fc); engine-truth row "
       "`gguf-norm-before-fc-no-weight`", engines=("llamacpp",),
       cannot_repair="needs input_norm.weight, or the flag switched off"),
    _e("gguf-format", "info", "a GGUF draft is loaded by llama.cpp only: checked as llama.cpp reads it when another "
       "engine was asked for", "use the HF checkpoint the GGUF came from for SGLang / vLLM / TensorRT-LLM",
       "llama.cpp `convert_hf_to_gguf.py` (EAGLE-3 drafts); SGLang / vLLM load HF checkpoints"),
    # -- keys, shapes, aux layers, NaN/Inf (checks_weights) -------------------------------------------------
    _e("key-layout", "error/warning/info", "decoder-layer keys an engine's loader skips or refuses (layers.0.* "
       "vs midlayer.*, a model. prefix, unknown names), or missing layer weights", "rename to the engine's "
       "layout (d2t-lab fix SRC DST) or re-export the missing weights", "SGLang / vLLM / TokenSpeed / llama.cpp "
       "EAGLE-3 `load_weights`", effects=("keys.missing", "keys.missing-norm", "keys.skipped", "keys.extra-skipped"),
       repairs="renames decoder-layer keys to the engine's layout",
       cannot_repair="needs the missing or unknown weights re-exported"),
    _e("fc-shape", "error", "fc does not take 3 x the target hidden size, or is missing / not 2-D",
       "use the draft trained for this target, or state target_hidden_size in config.json",
       "SGLang / vLLM `llama_eagle3.py` (fc: 3 x target hidden -> hidden)", effects=("fc-shape.missing",),
       cannot_repair="needs the draft trained for this target, or target_hidden_size in config.json"),
    _e("lm-head-missing", "error/warning", "no lm_head (or one of the wrong width): per engine, a random "
       "draft-vocab head or the target's shared head", "export the draft's lm_head", "vLLM PR #28549 "
       "(`llm_base_proposer.py` shares the target's head); SGLang `llama_eagle3.py`",
       effects=("lm-head-missing.borrowed", "lm-head-missing.random", "lm-head-missing.width"),
       cannot_repair="needs the draft's lm_head re-exported"),
    _e("embed-missing", "error/info", "no embed_tokens: the engine borrows the target's (an error when the hidden "
       "sizes differ)", "export the draft's embed_tokens (the kit's own commands take --embed-from TARGET)",
       "SGLang `eagle_worker.py` set_embed; vLLM `llm_base_proposer.py` _maybe_share_embeddings",
       cannot_repair="needs the draft's own embed_tokens"),
    _e("embed-untrained", "warning/info", "embed_tokens looks like a fresh initialisation: kept (random token "
       "vectors) or replaced by the target's, per engine", "drop embed_tokens.weight, or copy the target's in",
       "TorchSpec #38; engine-truth row `embed-untrained` (run: 1.006)",
       effects=("embed.untrained-kept", "embed.untrained-replaced")),
    _e("aux-layers", "error/warning/info", "the aux layer ids each engine reads, the target layers they capture, "
       "and ids out of range, of the wrong count, or absent", "name exactly the layers the draft was trained on, "
       "where each engine reads them", "vLLM PR #50170, vllm#54526, speculators#1065; SGLang / vLLM "
       "`set_eagle3_layers_to_capture`", effects=("aux.fc-width", "aux.capture-count", "aux.capture-count-normed", "aux.unstated", "aux.places",
                                                  "aux.shifted", "aux.default-layers"),
       cannot_repair="needs aux layer ids the target has"),
    _e("nonfinite-weights", "error/warning", "tensors hold NaN or Inf (a warning where only embedding rows do)", "use an earlier training checkpoint",
       "every engine: NaN weights make every draft token garbage (only the tokens whose rows hold them, for the "
       "embedding and the head: the mutation runs of docs/engine-truth.md)", effects=("nonfinite-weights.rows", "nonfinite-weights.head-nan"),
       cannot_repair="needs finite weights (an earlier training checkpoint)"),
    _e("weights-zero", "error/warning", "a tensor is all zeros (never trained, or lost in the export; a warning for "
       "an EAGLE-3.1 aux-state norm)",
       "re-export from the trained weights", "the mutation runs of docs/engine-truth.md: zeros anywhere but the MLP "
       "accept about nothing; in the MLP the attention path still drafts", effects=("weights-zero.mlp",
                                                                                "weights-zero.aux-norm"),
       cannot_repair="needs the trained weights"),
    _e("weight-shape", "error/warning", "a draft tensor's shape is not the one config.json gives it (a warning "
       "for a release whose loader drops the extra rows of a column-parallel weight)",
       "re-export the checkpoint with the config it was trained with", "vLLM's weight loaders assert each "
       "parameter's shape (the mutation runs of docs/engine-truth.md)", effects=("weight-shape.extra-rows",),
       cannot_repair="needs the weights the config "
       "describes"),
    # -- the checkpoint as a whole (diagnose) --------------------------------------------------------------
    _e("config-missing", "warning", "no config.json beside the weights: sizes cannot be checked",
       "copy the draft's config.json into the checkpoint folder", "every engine reads config.json first"),
    _e("config-only", "info", "only config.json was read: keys, shapes, mapping and the NaN/Inf scan need the "
       "weights", "point at the folder holding the weights", "the kit (doctor DRAFT/config.json)"),
    _e("training-checkpoint", "warning", "the weights are a trainer's training state, not an export",
       "export the draft (the trainer's save / export step)", "speculators / SpecForge trainer layouts"),
    _e("foreign-file", "info", "a file beside the draft that is not part of it was not read as one",
       "nothing to do", "the kit's checkpoint reader"),
    _e("shards-overlap", "warning", "a tensor stored in more than one shard of a sharded checkpoint (the index names "
       "one; a loader reading every shard may keep the other)", "write each tensor into the one shard the index names",
       "safetensors' sharded index; the kit's checkpoint reader"),
    _e("weights-beside-index", "warning", "a single-file checkpoint (model.safetensors / pytorch_model.bin) beside a "
       "sharded index: one of them is read, which one depends on the loader", "remove the stray file or the index",
       "the kit's checkpoint reader"),
    # -- config fields (checks_config) ---------------------------------------------------------------------
    _e("config-invalid", "error", "a config.json field (draft's or target's) the loaders refuse, or a tensor "
       "shape the config contradicts", "write the field as its declaration says (the finding names it)",
       "`helpers/model/config_fields.py`; transformers' config classes", effects=("config-invalid.kit",)),
    _e("kit-unmodelled", "info", "a valid option the kit's own forward does not model: evaluate and speculate "
       "refuse the draft, the engines' verdicts stand", "measure it served (d2t-lab probe, logs or metrics)",
       "the kit's draft forward (`helpers/model/draft.py`)"),
    # -- the engines' second wave (checks_target, checks_capture) -------------------------------------------
    _e("eagle3-as-eagle", "error", "an EAGLE-3 draft built or served as EAGLE (1/2): no aux states, fc skipped",
       "architectures [\"LlamaForCausalLMEagle3\"]; serve with EAGLE3 / method eagle3", "SGLang PR #21272; "
       "engine-truth row `method-eagle` (run)", effects=("algorithm.eagle-flag",)),
    _e("lm-head-borrowed", "error/warning", "SGLang borrows the target's lm_head exactly when draft_vocab_size is "
       "absent: a declared size without a head is random, a trained head is overwritten",
       "delete draft_vocab_size (no head), or export the head / set draft_vocab_size", "SGLang #27829 / PR "
       "#27908 (nvidia/Kimi-K2.6-Eagle3)", effects=("lm-head-missing.random",),
       cannot_repair="needs lm_head re-exported, or draft_vocab_size deleted from config.json"),
    _e("embed-mismatch", "error/warning/info", "the draft's embed_tokens differs from the target's (by rows, or a "
       "constant factor such as sqrt(hidden))", "use the target revision the draft was trained on",
       "SGLang `eagle_worker.py` set_embed; vLLM PR #28549",
       effects=("embed.differs", "embed.untrained-kept", "embed.untrained-replaced"),
       cannot_repair="needs the target's embed_tokens (or none) in place of the draft's"),
    _e("target-drift", "error/warning", "with --samples: the target's aux hidden states on the samples' own tokens "
       "differ from the stored ones (a quantized, rotated or re-released target); an error when the draft's argmax "
       "no longer agrees", "serve the target build the draft was trained on, or retrain on states captured from this "
       "one (a rotation: rotate the draft's fc)", "vllm-ascend #5974, fixed by rotating the draft's fc in #6914",
       cannot_repair="needs states from the served target, or the target the draft was trained on"),
    _e("vl-target-unsupported", "error", "a vision-language target whose wrapper has no EAGLE-3 capture in the "
       "engine release: it refuses to start with the draft", "serve a target type the engine captures for",
       "SGLang models/qwen2_vl.py; vLLM qwen2_vl.py (no SupportsEagle3); releases: rule vl.refuses",
       effects=("vl.unsupported",)),
    _e("context-length", "warning", "the draft's positions or RoPE are shorter than the target's: acceptance falls "
       "at long context", "serve no longer than the draft's context, or extend its RoPE", "sglang #6783, "
       "speculators PR #684 / #574, vllm #48894"),
    _e("aux-ids-unread", "error/warning/info", "the aux ids are named only where this release does not look, so it "
       "captures its default layers", "name the ids where the release reads them (the top-level list)",
       "TokenSpeed PR #526, llama.cpp #25794, vLLM `v1/worker/gpu/spec_decode/eagle/eagle3_utils.py`",
       effects=("aux.unread",)),
    _e("mapping-drift", "error/info", "against --previous: the mapping was rebuilt while lm_head kept the old row "
       "order", "ship the earlier d2t/t2d with these weights, or permute the head's rows", "SpecForge #534; "
       "engine-truth row `d2t-stale`", effects=("mapping-drift.partial",),
       cannot_repair="needs the d2t/t2d the head was trained with (the previous checkpoint's)"),
    # -- producer options (checks_variants) -----------------------------------------------------------------
    _e("variant-fc-norm", "error/warning/info", "fc_norm.* weights (EAGLE-3.1) and what each engine does with them "
       "(dropped, refused, read)", "serve with an engine that reads fc_norm, or drop the tensors if untrained",
       "NeMo Automodel #2897", effects=("variant-fc-norm.dropped", "variant-fc-norm.dropped-init",
                                        "variant.loads-unused")),
    _e("variant-norm-before-fc", "error/warning/info", "input_norm / norm_before_fc over the aux states before fc",
       "serve with an engine that reads norm_before_fc", "vLLM #42143; speculators", effects=("variant.loads-unused",)),
    _e("variant-norm-output", "error/warning/info", "norm_output: whether the final norm is applied before the state "
       "fed back, against what was trained", "set norm_output as the run trained", "SpecForge #879; speculators",
       effects=("variant.loads-unused",)),
    _e("variant-norm-before-residual", "error/warning/info", "norm_before_residual: read and applied, or ignored",
       "serve with an engine that reads norm_before_residual", "speculators; SGLang / vLLM `llama_eagle3.py`",
       effects=("variant.loads-unused",)),
    _e("variant-qk-norm", "error/warning/info", "q_norm / k_norm weights (Qwen3 drafts): loaded, dropped or refused",
       "serve with an engine that builds the Qwen3 draft layer", "vLLM `qwen3_eagle3.py`",
       effects=("variant.loads-unused",)),
    _e("variant-attention-bias", "error/warning/info", "q/k/v and o_proj biases: loaded with attention_bias, else "
       "dropped or refused", "set attention_bias as trained", "SGLang / vLLM `llama_eagle3.py`",
       effects=("variant.loads-unused",)),
    _e("variant-sliding-window", "error/warning/info", "a sliding window in the config: applied per layer, or none",
       "serve within the window, or with an engine that applies it", "vLLM `llama_eagle3.py` layer_types",
       effects=("variant.loads-unused",)),
    _e("variant-double-norm", "error/warning/info", "ModelOpt's double norm option, and whether the engine applies it",
       "serve with an engine that reads it", "ModelOpt EAGLE-3 exports", effects=("variant.loads-unused",)),
    _e("variant-rope-override", "error/warning/info", "a RoPE override in the draft config that the engine handles "
       "otherwise than trained", "state the RoPE the draft was trained with", "ModelOpt EAGLE-3 exports",
       effects=("variant.loads-unused",)),
    _e("variant-norm-twice", "error/warning/info", "fc_norm and norm_before_fc both on: the aux states are normed "
       "twice", "keep the config as the run trained", "speculators #670", effects=("variant.loads-unused",)),
    _e("config-incomplete", "error", "a speculators config (speculators_model_type) without its nested layer "
       "config, or without the speculators_config section by which an engine knows the format",
       "export the config with speculators (transformer_layer_config and speculators_config)",
       "speculators config format; vLLM `transformers_utils/configs/speculators` (rule speculators.detect)",
       effects=("speculators.undetected",)),
    _e("draft-layers", "error", "more decoder layers in the config than the draft has (the target's count copied)",
       "set num_hidden_layers to the draft's layer count (1)", "NeMo Automodel configs; engine-truth row "
       "`draft-layers-two`", effects=("layers.raises", "layers.random")),
    _e("mla-draft", "error/warning/info", "an MLA (DeepSeek / Kimi) draft and whether each release serves it",
       "serve with a release that has an MLA EAGLE-3 draft, with q_lora_rank in the config",
       "SGLang `kimi_k25_eagle3.py`; vLLM `deepseek_eagle3.py`", effects=("mla.kimi-undetected", "mla.mtp-rewrite")),
    # -- the newest vLLM's rules (checks_method) --------------------------------------------------------------
    _e("peagle-draft", "error/warning", "a P-EAGLE draft, refused by name by the newest vLLM",
       "serve with a vLLM release that reads P-EAGLE, or an EAGLE-3 export",
       "vLLM `transformers_utils/configs/speculators/algos.py`",
       engines=VLLM_ONLY, effects=("peagle.speculators", "peagle.architecture", "peagle.not-read")),
    _e("mask-hidden", "warning/info", "P-EAGLE's mask_hidden weight: loaded only under parallel_drafting, else "
       "skipped", "drop mask_hidden, or serve with parallel drafting", "vLLM `model_executor/models/llama_eagle3.py`",
       engines=VLLM_ONLY, effects=("mask-hidden.skipped",)),
    _e("speculative-option", "warning/info", "parallel_drafting / use_heterogeneous_vocab / custom_class in "
       "config.json: ignored there, refused as launch options", "leave them out of --speculative-config",
       "vLLM `config/speculative.py`", engines=VLLM_ONLY, effects=("config-key.ignored",)),
    _e("method-mismatch", "error", "a method that contradicts a draft class declaring its own speculator",
       "launch with the method the draft class declares", "vLLM `v1/worker/gpu/spec_decode/speculator_config.py`",
       engines=VLLM_ONLY, effects=("method.declared",)),
    _e("packed-target", "error/warning/info", "a packed-quantized target head / embedding: shared at most, the "
       "draft's own copy refused or kept apart, per release",
       "ship the draft's own lm_head / embed_tokens where the release keeps them",
       "vLLM `v1/worker/gpu/spec_decode/eagle/utils.py`", engines=VLLM_ONLY,
       effects=("packed-target.shared", "packed-target.own-copy")),
    # -- DFlash / DSpark / XPress (checks_dflash) ----------------------------------------------------------
    _e("dflash-draft", "info", "a DFlash / DSpark / XPress block-diffusion draft: the EAGLE-3 checks do not apply",
       "nothing to do", "z-lab/dflash; vLLM `dflash.py`"),
    _e("dflash-config", "error/warning/info", "config fields vLLM needs for a DFlash draft (architectures, mask "
       "token, markov_rank, block_size, method)", "write the field the finding names into config.json",
       "vLLM `qwen3_dflash.py`, `qwen3_dspark.py`", engines=VLLM_ONLY,
       effects=("dflash.arch-unknown", "dflash.mask-missing", "dflash.markov-rank")),
    _e("dflash-aux", "error/warning/info", "DFlash target_layer_ids (0-based; vLLM adds 1): absent, past the "
       "target, or written in the EAGLE-3 convention", "state the ids the draft was trained on, 0-based",
       "vLLM `eagle3_utils.py`; z-lab/dflash", engines=VLLM_ONLY,
       effects=("dflash.aux-count", "dflash.aux-default", "dflash.aux-shifted")),
    _e("dflash-fc-shape", "error", "fc's width against the layer ids vLLM sizes it for",
       "state the layer ids the draft was trained on", "vLLM `qwen3_dflash.py`", engines=VLLM_ONLY,
       effects=("dflash.fc-width",)),
    _e("dflash-vocab", "error/warning/info", "a DFlash draft's vocabulary: identity, offsets, padded DSpark, "
       "XPress full vocab only", "serve the export whose vocab the engine takes", "vllm#55133; vLLM "
       "`qwen3_xpress.py`", engines=VLLM_ONLY, effects=("dflash.no-map", "dflash.d2t-needed", "dflash.head-needed",
                                                        "dflash.dspark-reduced", "dflash.xpress-vocab")),
    _e("dflash-keys", "error/warning", "stored names vLLM's DFlash loader does not map, missing weights or norms, "
       "a mask_hidden weight", "re-export with the names the loader maps", "vLLM `qwen3_dflash.py` load_weights",
       engines=VLLM_ONLY, effects=("dflash.unknown-key", "dflash.weights-missing", "dflash.norms-missing",
                                   "dflash.mask-hidden")),
]
REGISTRY: dict[str, Entry] = {}
for _entry in _ENTRIES:
    if _entry.code in REGISTRY:
        raise ValueError(f"finding code {_entry.code!r} declared twice")
    if not set(_entry.severities) <= set(SEVERITIES):
        raise ValueError(f"finding code {_entry.code!r}: severities must be among {SEVERITIES}")
    REGISTRY[_entry.code] = _entry


def entry(code: str) -> Entry:
    """The declaration of `code`; a code without one raises (it cannot be emitted)."""
    try:
        return REGISTRY[code]
    except KeyError:
        raise ValueError(f"finding code {code!r} has no entry in helpers/doctor/registry.py") from None


def check_finding(code: str, severity: str, effect: str | None, engine: str | None) -> None:
    """Raise ValueError when a finding with these fields is not what the registry declares for `code`."""
    problem = entry(code).problem(severity, effect, engine)
    if problem:
        raise ValueError(f"finding {code}: {problem} in helpers/doctor/registry.py")


def cannot_repair(code: str) -> str:
    """What `d2t-lab fix` would need to resolve an error of `code` that it cannot supply."""
    e = REGISTRY.get(code)
    return (e.cannot_repair if e is not None else None) or "not something fix changes"


# -- the docs table -----------------------------------------------------------------------------------
BEGIN = "<!-- findings-registry: generated by python -m helpers.doctor.registry docs/doctor-findings.md -->"
END = "<!-- end of findings-registry -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table() -> str:
    """Every registry entry as one row of docs/doctor-findings.md's "Every finding" table."""
    rows = ["| code | severity | engines | outcome keys | what it says | fix (`d2t-lab fix`) | source |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for e in sorted(REGISTRY.values(), key=lambda e: e.code):
        fixer = (f"{e.fix}" + (f" (`fix`: {e.repairs})" if e.repairs else "")
                 + (f" (`fix` cannot: {e.cannot_repair})" if e.cannot_repair else ""))
        rows.append(f"| `{e.code}` | {' / '.join(e.severities)} | {', '.join(e.engines) if e.engines else 'all'} | "
                    f"{', '.join(f'`{k}`' for k in e.effect_keys)} | {_cell(e.doc)} | {_cell(fixer)} | "
                    f"{_cell(e.source)} |")
    return "\n".join(rows)


def render_docs(text: str) -> str:
    """`text` (docs/doctor-findings.md) with the table between BEGIN and END rendered from the registry."""
    if BEGIN not in text or END not in text:
        raise ValueError(f"no {BEGIN} ... {END} section")
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    return f"{head}{BEGIN}\n{markdown_table()}\n{END}{tail}"


if __name__ == "__main__":  # python -m helpers.doctor.registry docs/doctor-findings.md
    from pathlib import Path

    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_file():
        print("error: usage: python -m helpers.doctor.registry docs/doctor-findings.md", file=sys.stderr)
        sys.exit(2)
    doc = Path(sys.argv[1])
    try:
        new = render_docs(doc.read_text())
    except ValueError as err:
        print(f"error: {doc}: {err}", file=sys.stderr)
        sys.exit(2)
    doc.write_text(new)
