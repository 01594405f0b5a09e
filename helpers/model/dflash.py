"""Block-diffusion drafts (DFlash, DSpark, XPress): recognised from their config and tensor names, with the
target layers they read in each engine.

A DFlash draft (z-lab/dflash `DFlashDraftModel`) drafts a whole block in one pass over mask tokens,
conditioned on the hidden states of several target layers: `fc` projects their concatenation, then
`hidden_norm`. It stores neither the target's embedding nor its head (the engine shares the target's).
DSpark adds a Markov head (`markov_head.*`) and a confidence head; XPress a refiner head
(`xpress_head.*`); DFlash2 a candidate selector. They read d2t as EAGLE-3 drafts do: offsets,
target = i + d2t[i].

The layer ids. The DFlash project's ids are 0-based target layers whose OUTPUT is read: z-lab's
`extract_context_feature` takes `hidden_states[id + 1]` of transformers' output (index 0 is the
embeddings). vLLM hands the target aux ids and records, for aux id k, the hidden state after layer
k - 1 (k = 0: the embeddings), i.e. the INPUT of layer k. So vLLM adds 1 to a DFlash id
(`dflash.aux.shift`): DFlash id t is the output of layer t, the input of layer t + 1, the same layer
z-lab trains on. vLLM's EAGLE-3 ids are used as given (id i: the input of layer i, one layer earlier
than a DFlash id i); SGLang's EAGLE-3 ids get +1 like DFlash's. Where vLLM looks, first non-empty
wins (`dflash.aux.from`, `helpers.engines.table`): `top` = `eagle_aux_hidden_state_layer_ids`
(as given; speculators' `aux_hidden_state_layer_ids` lands there), `dflash` =
`dflash_config.target_layer_ids` (+1), `nested` = `eagle_config.eagle_aux_hidden_state_layer_ids`
(0.22-0.33 V1 runner: when an `eagle_config` dict exists it replaces the DFlash ids, as given),
`dspark` = `dspark_target_layer_ids` (+1; as given for model_type deepseek_v41), `target` =
top-level `target_layer_ids` (+1), `layer_ids` = `dflash_config.layer_ids` / `eagle_config.layer_ids`
(as given). None found: the target's default capture (2, L // 2, L - 3), and `fc` sized for the
draft's `num_hidden_layers` states.

Sources: vLLM's `v1/worker/gpu/spec_decode/eagle/eagle3_utils.py`, `model_executor/models/
{qwen3_dflash,qwen3_dspark,qwen3_xpress,registry}.py`, `v1/worker/gpu/spec_decode/speculator_config.py`,
`v1/worker/gpu_model_runner.py` (the releases of each, per rule `dflash.*`, are the engine table's);
z-lab/dflash `dflash/model.py`.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from helpers.engines.registry import engine_at

# architectures[0] -> (kind, the model file vLLM builds it with). The kind fixes vLLM's method: dflash
# and xpress drafts are served with method "dflash", dspark drafts with "dspark" (each registered
# model's speculator config, vLLM's registry.py / speculator_config.py).
ARCHITECTURES = {
    "DFlashDraftModel": ("dflash", "qwen3_dflash.py"),
    "DFlash2DraftModel": ("dflash", "qwen3_dflash2.py"),
    "DFlash2BeamDraftModel": ("dflash", "models/beam"),
    "DFlash2RicursiveDraftModel": ("dflash", "ricursive_dflash2.py"),
    "DFlashLagunaForCausalLM": ("dflash", "laguna_dflash.py"),
    "MuseGlimmerAssistantModel": ("dflash", "qwen3_dflash.py"),
    "DFlashMuseGlimmerAssistantModel": ("dflash", "qwen3_dflash.py"),
    "Qwen3XPressModel": ("xpress", "qwen3_xpress.py"),
    "DFlashQwen3XPressModel": ("xpress", "qwen3_xpress.py"),
    "DSparkDraftModel": ("dspark", "qwen3_dspark.py (model_type qwen3), else models/deepseek_v4"),
    "DSparkV41DraftModel": ("dspark", "models/deepseek_v41"),
    "DSparkMiniMaxDraftModel": ("dspark", "models/minimax_m3"),
    "Qwen3DSparkModel": ("dspark", "qwen3_dspark.py"),
    "Qwen3OmniDSparkModel": ("dspark", "qwen3_dspark.py"),
    "K3DSparkModel": ("dspark", "models/kimi_k3"),
    "MuseSparkDSparkModel": ("dspark", "models/muse_spark"),
    "MistralLarge4DSparkModel": ("dspark", "models/mistral"),
    "Gemma4DSparkModel": ("dspark", "gemma4_dspark.py"),
}
METHOD = {"dflash": "dflash", "xpress": "dflash", "dspark": "dspark"}
SPECULATORS_TYPES = {"dflash": "dflash", "dflash2": "dflash", "dspark": "dspark"}  # speculators_model_type -> kind
# Tensor names only a block-diffusion draft has (a DFlash v1 draft's names are an EAGLE-3 draft's, in more layers).
KEY_MARKERS = (("markov_head.", "dspark"), ("confidence_head.", "dspark"), ("xpress_head.", "xpress"),
               ("candidate_selector.", "dflash"))
# The names one DFlash (Qwen3) decoder layer holds, after `layers.N.` (z-lab/dflash model.py).
LAYER_WEIGHTS = ("input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight",
                 "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                 "self_attn.q_norm.weight", "self_attn.k_norm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                 "mlp.down_proj.weight")
LAYER_NORMS = ("input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_norm.weight",
               "self_attn.k_norm.weight")
TOP_WEIGHTS = ("fc.weight", "hidden_norm.weight", "norm.weight")
_LAYER = re.compile(r"^layers\.(\d+)\.(.+)$")


@dataclass(frozen=True)
class DFlashDraft:
    """What a block-diffusion draft's config (and tensor names) say, in the fields vLLM reads."""

    kind: str  # dflash | dspark | xpress
    method: str  # vLLM's speculative method for it: dflash | dspark
    architecture: str | None
    model_file: str | None  # the vLLM model file that builds it (None: no registered architecture)
    variant: str | None  # dflash2 (candidate selector), speculators (a speculators config), ...
    evidence: tuple[str, ...]
    layer_ids: dict = field(default_factory=dict)  # place -> ids as written ("dflash", "top", ...)
    block_size: int | None = None
    block_size_from: str | None = None
    mask_token_id: int | None = None
    mask_token_from: str | None = None
    num_target_layers: int | None = None
    num_hidden_layers: int | None = None
    hidden_size: int | None = None
    target_hidden_size: int | None = None
    vocab_size: int | None = None
    draft_vocab_size: int | None = None
    model_type: str | None = None
    use_aux_hidden_state: bool = True
    has_eagle_config: bool = False  # a non-empty eagle_config dict (the V1 runner then takes its ids)

    @property
    def trained_ids(self) -> list[int] | None:
        """The 0-based target layers the DFlash trainer read (z-lab: `dflash_config.target_layer_ids`,
        else the top-level `target_layer_ids`; speculators' aux ids minus 1), None when not stated."""
        for place in ("dflash", "target", "dspark"):
            if self.layer_ids.get(place):
                return list(self.layer_ids[place])
        if self.variant == "speculators" and self.layer_ids.get("top"):
            return [i - 1 for i in self.layer_ids["top"]]
        return None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["evidence"] = list(self.evidence)
        d["trained_layer_ids"] = self.trained_ids
        return d


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _ids(v) -> list[int] | None:
    """A non-empty list of ints (what vLLM's `if not layer_ids` lets through), else None."""
    if isinstance(v, (list, tuple)) and v and all(_int(i) is not None for i in v):
        return [int(i) for i in v]
    return None


def _arch_kind(arch: str | None) -> str | None:
    return ARCHITECTURES[arch][0] if arch in ARCHITECTURES else None


def dflash_draft(cfg: dict | None, keys=()) -> DFlashDraft | None:
    """The block-diffusion draft a config (and its tensor names) describe, or None for any other draft.

    Recognised by: a registered DFlash/DSpark/XPress architecture; a speculators config of type
    dflash/dflash2/dspark; a `dflash_config` section; or a tensor only these drafts have
    (`markov_head.*`, `xpress_head.*`, `candidate_selector.*`).
    """
    cfg = cfg if isinstance(cfg, dict) else {}
    keys = [k[len("model."):] if k.startswith("model.") else k for k in keys]
    archs = [a for a in (cfg.get("architectures") or []) if isinstance(a, str)]
    arch = archs[0] if archs else None
    evidence, kind, variant = [], None, None
    if _arch_kind(arch):
        kind = _arch_kind(arch)
        evidence.append(f"architectures[0] is {arch}")
        if arch.startswith("DFlash2"):
            variant = "dflash2"
    spec_type = cfg.get("speculators_model_type")
    if spec_type in SPECULATORS_TYPES:
        kind = kind or SPECULATORS_TYPES[spec_type]
        variant = "speculators"
        evidence.append(f"speculators_model_type is {spec_type}")
    dconf = cfg.get("dflash_config") if isinstance(cfg.get("dflash_config"), dict) else None
    if dconf is not None:
        evidence.append("config.json has a dflash_config section")
        if kind is None:
            kind = "dspark" if dconf.get("projector_type") == "dspark" or "markov_rank" in dconf else "dflash"
    for prefix, k in KEY_MARKERS:
        if any(key.startswith(prefix) for key in keys):
            evidence.append(f"tensors named {prefix}*")
            kind = kind or k
            if prefix == "candidate_selector.":
                variant = variant or "dflash2"
    if kind is None:
        return None
    layer = cfg.get("transformer_layer_config") if isinstance(cfg.get("transformer_layer_config"), dict) else cfg
    dconf = dconf or {}
    ids = {
        "top": _ids(cfg.get("eagle_aux_hidden_state_layer_ids")) or _ids(cfg.get("aux_hidden_state_layer_ids")),
        "dflash": _ids(dconf.get("target_layer_ids")),
        "nested": _ids((cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids"))
        if isinstance(cfg.get("eagle_config"), dict) else None,
        "dspark": _ids(cfg.get("dspark_target_layer_ids")),
        "target": _ids(cfg.get("target_layer_ids")),
        "layer_ids": _ids(dconf.get("layer_ids")) or (_ids(cfg.get("eagle_config", {}).get("layer_ids"))
                                                       if isinstance(cfg.get("eagle_config"), dict) else None),
    }
    block, block_from = None, None
    for name, where in (("block_size", dconf), ("block_size", cfg), ("dspark_block_size", cfg)):
        if _int(where.get(name)) is not None:
            block, block_from = int(where[name]), ("dflash_config." if where is dconf else "") + name
            break
    mask, mask_from = None, None
    for name, where in (("mask_token_id", dconf), ("mask_token_id", cfg), ("dspark_noise_token_id", cfg)):
        if _int(where.get(name)) is not None:
            mask, mask_from = int(where[name]), ("dflash_config." if where is dconf else "") + name
            break
    use_aux = dconf.get("use_aux_hidden_state", cfg.get("use_aux_hidden_state", True))
    return DFlashDraft(
        kind=kind, method=METHOD[kind], architecture=arch,
        model_file=ARCHITECTURES[arch][1] if arch in ARCHITECTURES else None, variant=variant,
        evidence=tuple(evidence), layer_ids={k: v for k, v in ids.items() if v is not None},
        block_size=block, block_size_from=block_from, mask_token_id=mask, mask_token_from=mask_from,
        num_target_layers=_int(cfg.get("num_target_layers")), num_hidden_layers=_int(layer.get("num_hidden_layers")),
        hidden_size=_int(layer.get("hidden_size")), target_hidden_size=_int(cfg.get("target_hidden_size")),
        vocab_size=_int(layer.get("vocab_size")), draft_vocab_size=_int(cfg.get("draft_vocab_size")),
        model_type=layer.get("model_type") if isinstance(layer.get("model_type"), str) else None,
        use_aux_hidden_state=use_aux is not False,
        has_eagle_config=isinstance(cfg.get("eagle_config"), dict) and bool(cfg["eagle_config"]),
    )


# -- what an engine makes of the ids -----------------------------------------------------------------
def vllm_aux_ids(d: DFlashDraft, engine="vllm") -> tuple[list[int] | None, str | None]:
    """(the aux ids vLLM hands the target, the place they came from), at the engine release given
    (`EngineAt` or an `--engine` value naming vLLM); (None, None) when it finds none and falls back to
    the target's default capture. Raises ValueError when the kit has not read that release's rule."""
    at = engine_at(engine)
    places, shift = at.value("dflash.aux.from"), at.value("dflash.aux.shift")
    if not isinstance(places, tuple) or not isinstance(shift, int):
        raise ValueError(f"the kit has not read how {at.label} reads a DFlash draft's layer ids")
    v41 = d.model_type == "deepseek_v41"
    given = {"top", "nested", "layer_ids"}
    found, where = None, None
    for place in places:
        ids = d.layer_ids.get(place)
        if place == "nested" and where == "dflash" and d.has_eagle_config:
            # the V1 runner: an eagle_config dict replaces the DFlash ids, with None when it names none
            nested = d.layer_ids.get("nested")
            found, where = (list(nested), "nested") if nested else (None, None)
            continue
        if found is not None or not ids:
            continue
        add = 0 if place in given or (place == "dspark" and v41) else shift
        found, where = [i + add for i in ids], place
    return found, where


PLACE_NAMES = {
    "top": "eagle_aux_hidden_state_layer_ids", "dflash": "dflash_config.target_layer_ids",
    "nested": "eagle_config.eagle_aux_hidden_state_layer_ids", "dspark": "dspark_target_layer_ids",
    "target": "target_layer_ids", "layer_ids": "dflash_config.layer_ids",
}


def default_capture(num_layers: int) -> list[int]:
    """vLLM's default aux ids for a Llama/Qwen-style target (interfaces.py): 2, L // 2, L - 3."""
    return [2, num_layers // 2, num_layers - 3]


def capture_per_engine(d: DFlashDraft, engines, num_layers: int | None = None) -> dict:
    """Per engine key: the aux ids it hands the target, where they came from, and the 0-based target
    layers whose OUTPUT the draft then reads (aux id k: the output of layer k - 1); None for an engine
    whose DFlash path the kit has not read. Without ids and with `num_layers`, the default capture."""
    out = {}
    for at in engines:
        try:
            ids, place = vllm_aux_ids(d, at) if at.has("dflash.aux.from") else (None, None)
        except ValueError:
            ids, place = None, None
        if not isinstance(at.value("dflash.aux.shift"), int):  # the table holds the rule for the engines read
            out[at.key] = None
            continue
        if ids is None and num_layers is not None:
            ids, place = default_capture(num_layers), "default"
        out[at.key] = {"release": at.version, "aux_ids": ids, "from": PLACE_NAMES.get(place, place),
                       "output_of_layers": None if ids is None else [i - 1 for i in ids]}
    return out


def fc_inputs(d: DFlashDraft, aux_ids: list[int] | None) -> int | None:
    """How many hidden states vLLM sizes `fc` for: one per aux id, or the draft's num_hidden_layers
    when it reads none (qwen3_dflash.py `_get_dflash_fc_input_size`)."""
    return len(aux_ids) if aux_ids else d.num_hidden_layers


def layer_of(key: str) -> tuple[int | None, str]:
    """(layer index, the name inside the layer) of a stored name; (None, name) for a top-level one."""
    m = _LAYER.match(key)
    return (int(m.group(1)), m.group(2)) if m else (None, key)


def default_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """The ids z-lab's trainer picks by default: evenly from layer 1 to L - 3 (L // 2 for a one-layer draft);
    [1, 9, 17, 25, 33] for 36 target layers and 5 draft layers."""
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    start, end = 1, num_target_layers - 3
    return [int(round(start + i * (end - start) / (num_draft_layers - 1))) for i in range(num_draft_layers)]
