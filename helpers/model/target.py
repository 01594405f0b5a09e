"""The target model: a Hugging Face causal LM loaded with `transformers`, and the hidden states
an EAGLE-3 draft reads from it.

`load_target` reads the weight shapes first and refuses, with the estimate, a load the device
has no room for (as `load_draft` does); on a GPU a target larger than one device is spread over
all of them with `device_map="auto"` (`accelerate`). The default dtype is bf16 on a GPU and fp32
on CPU.

`HiddenStateCapture` records, during any forward of the target, the INPUT of the chosen decoder
layers (the aux hidden states, concatenated in order) and the OUTPUT of the final norm (the last
hidden state as SpecForge stores it). Forward hooks are used rather than `output_hidden_states`:
they keep only the layers asked for, and they do not depend on how a transformers version fills
that tuple (transformers 5 puts the normed state in its last slot, replacing the last layer's
output). Which layers an engine captures for a draft config's aux ids is
`helpers.engines.registry.captured_layers` (SGLang adds 1 to configured ids, vLLM uses them as given; both
default to layers 2, L//2, L-3): docs/eagle3-facts.md, 'Aux layers'.

`attention_layout` reads the attention type of every decoder layer and the sliding window from a
target config; `speculation_refusal` is the rule on a config for what the speculate loop can run
(decoder-only causal LM, no recurrent state, only full and sliding-window attention layers, a
decoder whose layers and final norm the capture can hook), checked by `check_speculation_target`
from config.json alone, before any weight is read.

`draft_mismatches` compares a target with a draft checkpoint: vocab size, hidden size
(`target_hidden_size`) and, when the draft carries one, its `embed_tokens` (a wrong target
revision or a missed embedding scale shows here), with the doctor's own comparison
(`helpers.model.fit`). Each mismatch is one line.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from helpers.core.devices import (
    available_bytes,
    default_dtype,
    parse_dtype,
    resolve_device,
)
from helpers.engines.registry import aux_ids, draft_capture, layers_in, release_capture_note
from helpers.core.errors import BadInputError, clip
from helpers.io.checkpoint import Checkpoint, open_checkpoint
from helpers.io.configs import read_config
from helpers.model.config_fields import check_target_config
from helpers.model.fit import compare_to_target

ACTIVATION_MARGIN = 1.2  # weights x this: room for activations and the KV cache of short prompts
FULL_ATTENTION, SLIDING_ATTENTION = "full_attention", "sliding_attention"  # transformers' layer type names


@dataclass
class Target:
    """A loaded target: the `transformers` model, its tokenizer, where it came from."""

    model: torch.nn.Module
    tokenizer: object | None
    path: Path
    device: torch.device
    dtype: torch.dtype

    @property
    def config(self):
        return self.model.config

    @property
    def text_config(self):
        cfg = self.model.config
        return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg

    @property
    def num_layers(self) -> int:
        return len(self.decoder.layers)

    @property
    def hidden_size(self) -> int:
        return int(self.text_config.hidden_size)

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_input_embeddings().weight.shape[0])

    @property
    def decoder(self):
        return self.model.get_decoder()

    @property
    def input_device(self) -> torch.device:
        return self.model.get_input_embeddings().weight.device

    def embedding(self) -> torch.Tensor:
        return self.model.get_input_embeddings().weight

    def aux_layers(self, engine: str, ids: list[int] | None) -> list[int]:
        """The decoder layers whose input `engine` feeds the draft, for configured `ids`."""
        try:
            return layers_in(engine, ids, self.num_layers, getattr(self.text_config, "model_type", None))
        except ValueError as e:
            raise BadInputError(self.path, str(e)) from None

    def draft_layers(self, draft, engine: str) -> list[int]:
        """The decoder layers whose input `engine` feeds `draft` (a path, an open `Checkpoint`, a
        loaded draft, or None: the engine's default), from the aux ids it reads in the draft's config."""
        try:
            return draft_capture(engine, _draft_config(draft), self.num_layers,
                                 getattr(self.text_config, "model_type", None))[1]
        except ValueError as e:
            raise BadInputError(self.path, str(e)) from None

    def release_note(self, draft, engine: str) -> str | None:
        """One line when `engine` names no release and its releases feed `draft` different layers of this
        target (`helpers.engines.registry.release_capture_note`), else None."""
        return release_capture_note(engine, _draft_config(draft), self.num_layers,
                                    getattr(self.text_config, "model_type", None))


def _draft_config(draft) -> dict | None:
    """The config of a draft given as a path, an open `Checkpoint` or a loaded draft (None: none)."""
    if isinstance(draft, torch.nn.Module):  # its own Checkpoint (load_draft keeps it), else its folder
        draft = getattr(draft, "checkpoint", None) or getattr(draft, "source", None)
    return None if draft is None or (isinstance(draft, str) and not draft) else _checkpoint(draft).config


def _weights(path: Path):
    if not path.is_dir():
        raise BadInputError(path, "is not a folder: a target is a Hugging Face model folder (config.json + weights)"
                            if path.exists() else "no such target folder")
    if not (path / "config.json").is_file():
        raise BadInputError(path, "has no config.json: not a Hugging Face model folder")
    ck = open_checkpoint(path)
    if ck.config is not None:  # each field the kit (and transformers) reads typed, the first wrong one named
        check_target_config(ck.config, path / "config.json")
    return ck


def _weights_bytes(ck: Checkpoint, dtype=None) -> int:
    """Bytes the target's weights take in `dtype` (from tensor shapes; no tensor data is read)."""
    dtype = dtype or torch.float32
    return sum(math.prod(ck.tensors.shape(k)) for k in ck.tensors.keys()) * dtype.itemsize


def _placement(ck: Checkpoint, path: Path, device: torch.device, dtype: torch.dtype):
    """(device_map or None) for the target open as `ck`; a one-line refusal when it cannot fit."""
    need = int(_weights_bytes(ck, dtype) * ACTIVATION_MARGIN)
    free = available_bytes(device)
    if free is None or need <= free:
        return None
    if device.type == "cuda" and device.index is None and torch.cuda.device_count() > 1:
        total = sum(available_bytes(torch.device("cuda", i)) or 0 for i in range(torch.cuda.device_count()))
        if need <= total:
            return "auto"  # accelerate spreads the layers over the GPUs
        free = total
    raise BadInputError(path, f"loading the target needs about {need / 2**30:.2f} GiB on {device} in "
                        f"{str(dtype).removeprefix('torch.')} but only {free / 2**30:.2f} GiB is free")


def load_target(path, device=None, dtype=None, tokenizer: bool = True, device_map=None) -> Target:
    """Load a Hugging Face causal-LM folder (weights, config.json, tokenizer files) for inference."""
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    path = Path(path)
    device = resolve_device(device)
    dtype = parse_dtype(dtype) or default_dtype(device)
    ck = _weights(path)  # its files opened once: checked, and measured for the placement
    device_map = device_map or _placement(ck, path, device, dtype)
    hf_logging.set_verbosity_error()  # the kit prints its own messages
    hf_logging.disable_progress_bar()
    try:
        model = _model_class(path).from_pretrained(
            path, dtype=dtype, device_map=device_map or None, low_cpu_mem_usage=True)
    except (OSError, ValueError, KeyError) as e:
        raise BadInputError(path, f"transformers cannot load this target: {clip(str(e).splitlines()[0], 200)}") from None
    if device_map is None:
        model.to(device)
    model.eval()
    tok = None
    if tokenizer:
        try:
            tok = AutoTokenizer.from_pretrained(path)
        except (OSError, ValueError, KeyError) as e:
            raise BadInputError(path, f"has no tokenizer transformers can load ({clip(str(e).splitlines()[0], 160)})") from None
    return Target(model, tok, path, device, dtype)


class HiddenStateCapture:
    """Record the inputs of `layers` (aux) and the final norm's output during target forwards.

        with HiddenStateCapture(target, [2, 4, 5]) as cap:
            target.model.model(ids)              # any forward: plain, cached, generate
        aux, last = cap.aux(), cap.last()        # [B, T, len(layers) * H], [B, T, H]
    """

    def __init__(self, target: Target, layers: list[int]):
        self.target, self.layers = target, list(layers)
        self._store: dict = {}
        self._hooks: list = []

    def __enter__(self) -> HiddenStateCapture:
        dec = self.target.decoder
        for i in sorted(set(self.layers)):
            # index L (llama.cpp's aux id == L): the last layer's output, the final norm's input
            module = dec.norm if i == len(dec.layers) else dec.layers[i]
            self._hooks.append(module.register_forward_pre_hook(self._pre(i), with_kwargs=True))
        self._hooks.append(dec.norm.register_forward_hook(self._post))
        return self

    def __exit__(self, *exc) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks.clear()

    def _pre(self, i):
        def hook(module, args, kwargs):
            self._store[i] = args[0] if args else kwargs["hidden_states"]
        return hook

    def _post(self, module, args, output):
        self._store["last"] = output[0] if isinstance(output, tuple) else output

    def aux(self) -> torch.Tensor:
        dev = self._store[self.layers[0]].device
        return torch.cat([self._store[i].to(dev) for i in self.layers], dim=-1)

    def last(self) -> torch.Tensor:
        return self._store["last"]

    def clear(self) -> None:
        self._store.clear()


def _checkpoint(draft) -> Checkpoint:
    """A draft given as a path / URL, an open `Checkpoint` or a loaded draft (its `.checkpoint`)."""
    if isinstance(draft, Checkpoint):
        return draft
    ck = getattr(draft, "checkpoint", None)
    return ck if isinstance(ck, Checkpoint) else open_checkpoint(draft)


def draft_aux_ids(draft, engine) -> list[int] | None:
    """The aux layer ids `engine` (a name, optionally ==VERSION) reads from a draft's config (None:
    none, the engine's default); `draft` is a path, an open `Checkpoint` or a loaded draft (nothing
    is opened again for the last two)."""
    return aux_ids(engine, _checkpoint(draft).config)


def draft_mismatches(target: Target, draft, embed_rows: int = 4096) -> list[str]:
    """One line per way `draft` does not fit `target` (empty: it fits): vocab size, hidden size,
    and the draft's own `embed_tokens` against the target's (the same `embed_rows` evenly spaced
    rows of both), by `fit.compare_to_target`. `draft` is a path, an open `Checkpoint` or a loaded
    draft; a loaded one's embedding is compared from memory (no file is read)."""
    ck = _checkpoint(draft)
    fc = ck.tensors.find("fc.weight")
    key = ck.tensors.find("embed_tokens.weight")
    theirs = target.embedding()
    mine = ours = None
    if key is not None:
        shape = tuple(ck.tensors.shape(key))
        if shape == tuple(theirs.shape):  # the same evenly spaced rows of both
            rows = torch.linspace(0, shape[0] - 1, min(embed_rows, shape[0])).long()
            loaded = getattr(draft, "embed_tokens", None)
            if loaded is not None and getattr(draft, "embed_stored", False):
                mine = loaded.weight.detach()[rows.to(loaded.weight.device)].float().cpu()
            else:
                mine = ck.tensors.get(key, "cpu")[rows].float()
            ours = theirs.detach()[rows.to(theirs.device)].float().cpu()
        else:  # only the shapes are compared: nothing to read
            mine, ours = torch.empty(shape, device="meta"), torch.empty(tuple(theirs.shape), device="meta")
    found = compare_to_target(ck.config or {}, target.text_config.to_dict(), draft_embed=mine, target_embed=ours,
                              fc_in=ck.tensors.shape(fc)[1] if fc else None)
    return [f"{m.field}: {m.detail}" for m in found if m.field in ("vocab_size", "hidden_size", "embed_tokens")]


def describe(target: Target) -> dict:
    """What a manifest or report says about a target."""
    return {"path": os.fspath(target.path), "model_type": getattr(target.config, "model_type", None),
            "num_layers": target.num_layers, "hidden_size": target.hidden_size, "vocab_size": target.vocab_size,
            "dtype": str(target.dtype).removeprefix("torch."), "device": str(target.device)}


def attention_layout(config) -> tuple[list[str], int | None]:
    """(attention type of each decoder layer, sliding window or None) of a target config, read as
    transformers' models read it: `layer_types` when the config has them (GPT-OSS, Gemma 2/3,
    Qwen 2/3), otherwise every layer "sliding_attention" when `sliding_window` is set (Mistral),
    "chunked_attention" with `attention_chunk_size`, else "full_attention"."""
    cfg = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    types = getattr(cfg, "layer_types", None)
    window = getattr(cfg, "sliding_window", None)
    if types is None:
        kind = (SLIDING_ATTENTION if window is not None else
                "chunked_attention" if getattr(cfg, "attention_chunk_size", None) is not None else FULL_ATTENTION)
        types = [kind] * int(getattr(cfg, "num_hidden_layers", 0) or 0)
    types = [str(t) for t in types]
    return types, (int(window) if window is not None and SLIDING_ATTENTION in types else None)


def _causal_lm_class(config):
    """The class transformers builds for `config`: its causal LM, or for a vision-language wrapper
    (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, ...: the language model under `text_config`, which
    AutoModelForCausalLM does not map) its image-text-to-text class; None when neither."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    for auto in (AutoModelForCausalLM, AutoModelForImageTextToText):
        try:
            return auto._model_mapping[type(config)]
        except (KeyError, ValueError):
            continue
    return None


def _model_class(path: Path):
    """The auto class that loads the target at `path`: AutoModelForCausalLM, or for a VL wrapper
    it does not map, AutoModelForImageTextToText (text-only prompts then run through its language
    model; `Target.decoder` is that language model)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    try:
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError, KeyError):
        return AutoModelForCausalLM  # its own error names the problem
    if type(config) in AutoModelForCausalLM._model_mapping or type(config) not in AutoModelForImageTextToText._model_mapping:
        return AutoModelForCausalLM
    return AutoModelForImageTextToText


def _decoder_misses(cls, config, model=None) -> list[str]:
    """What `HiddenStateCapture` needs and the model lacks (its decoder's `layers` and `norm`), on
    `model` or else an instance built on the meta device (no memory, no weights); [] when that
    cannot be built."""
    try:
        if model is None:
            with torch.device("meta"):
                model = cls._from_config(config)
        dec = model.get_decoder()
    except Exception:  # noqa: BLE001 - a model that cannot be built on meta is judged when it loads
        return []
    return [name for name in ("layers", "norm") if not hasattr(dec, name)]


RECURRENT_LAYER_TYPES = {"linear_attention", "mamba", "mamba2", "recurrent", "rwkv", "ssm"}


def speculation_refusal(config, model=None) -> str | None:
    """Why the speculate loop cannot run a target with this config (None: it can), one line.

    The loop needs a decoder-only causal LM whose KV cache can be cut back to the accepted tokens
    and whose verify step can be masked per layer: every layer full attention or sliding-window
    attention. Refused: encoder-decoders (T5, BART), models that carry a recurrent state (the
    ones transformers marks `_is_stateful` and refuses for its own assisted generation: Mamba,
    RWKV, Jamba, Zamba, Qwen3-Next, ...), any other layer type (chunked, linear, indexed, ...), and
    a decoder without the `layers` / `norm` the aux-state capture hooks (GPT-2's `h` / `ln_f`).
    """
    import transformers

    mt = getattr(config, "model_type", None) or "?"
    if getattr(config, "is_encoder_decoder", False):
        return f"model_type {mt!r} is an encoder-decoder: speculate verifies with a decoder-only causal LM"
    cls = type(model) if model is not None else _causal_lm_class(config)
    if cls is None:
        return f"transformers {transformers.__version__} has no causal-LM class for model_type {mt!r}"
    types, window = attention_layout(config)
    other = sorted(set(types) - {FULL_ATTENTION, SLIDING_ATTENTION})
    # transformers marked these classes `_is_stateful` (to 5.24); 5.25 describes Mamba's layers as
    # `linear_attention` in layer_types instead: either way the state cannot be rolled back
    if getattr(cls, "_is_stateful", False) or set(other) & RECURRENT_LAYER_TYPES:
        return (f"{cls.__name__} carries a recurrent state (state-space or linear-attention layers) that cannot be "
                f"rolled back to the accepted tokens; speculate needs attention layers with a KV cache")
    if other:
        return (f"{cls.__name__} has {', '.join(other)} layers: speculate keeps KV rows and masks the verify "
                f"step for full and sliding-window attention layers only")
    if window is not None and not hasattr(transformers.DynamicCache(), "layers"):
        return (f"{cls.__name__} has sliding-window layers, which speculate runs with transformers >= 4.56 "
                f"(installed: {transformers.__version__})")
    miss = _decoder_misses(cls, config, model)
    if miss:
        return (f"{cls.__name__}'s decoder has no {' / '.join(miss)}: the aux hidden states are captured from "
                f"the decoder's `layers` and final `norm`")
    return None


def transformers_refusal(cfg: dict) -> str | None:
    """Why the installed transformers cannot build a config from this target's config.json (None: it
    can): an unknown model_type, or a value its validators refuse (layer_types, RoPE, ...)."""
    import transformers
    from transformers import CONFIG_MAPPING

    kind = cfg.get("model_type")
    if not isinstance(kind, str) or kind not in CONFIG_MAPPING:
        return f"model_type {kind!r} is not a model type transformers {transformers.__version__} knows"
    try:
        CONFIG_MAPPING[kind].from_dict(dict(cfg))
    except Exception as e:  # its validators raise ValueError, KeyError, TypeError and huggingface_hub's errors
        inner = e.__cause__ or e
        text = str(inner).strip().splitlines()[0] if str(inner).strip() else type(inner).__name__
        return f"transformers {transformers.__version__} refuses it: {clip(text, 200)}"
    return None


def check_speculation_target(path) -> None:
    """Refuse, from config.json alone (before loading), a target the speculate loop cannot run: its
    config.json read and typed here, then `check_speculation_config`."""
    path = Path(path)
    if not (path / "config.json").is_file():
        return  # load_target names the missing folder or file
    check_speculation_config(path, check_target_config(read_config(path / "config.json"), path / "config.json"))


def check_speculation_config(path, cfg: dict) -> None:
    """`check_speculation_target` on the target's config.json as the door read and typed it
    (`Inputs.target_cfg`): not read again."""
    from transformers import AutoConfig

    path = Path(path)
    why = transformers_refusal(cfg)
    if why:
        raise BadInputError(path / "config.json", why)
    try:
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError, KeyError) as e:
        raise BadInputError(path, f"transformers cannot read this target's config: {str(e).splitlines()[0][:200]}") \
            from None
    why = speculation_refusal(config)
    if why:
        raise BadInputError(path, f"cannot be a speculate target: {why}")
