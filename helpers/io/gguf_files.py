"""GGUF draft files: llama.cpp's EAGLE-3 drafts, read as the kit's HF-layout checkpoint and written as
llama.cpp's converter writes them.

llama.cpp serves an EAGLE-3 draft only as a GGUF that its `convert_hf_to_gguf.py --target-model-dir
TARGET` made (conversion/llama.py, read at the llama.cpp release the engine table names). What that file holds, and how it differs from the HF
checkpoint it came from:

- metadata `general.architecture = "eagle3"` and `eagle3.*` keys (the layer sizes, `eagle3.vocab_size`
  = the TARGET vocab, `eagle3.target_layers` = the aux ids used as layer-input ids), plus the target's
  `tokenizer.*` keys;
- tensors under llama.cpp's names (`token_embd`, `fc`, `output`, `blk.0.*`, `output_norm`,
  `enc_output_norm`, `d2t`), with `attn_q` / `attn_k` permuted for llama.cpp's RoPE layout
  (`permute_qk`; read back with `unpermute_qk`); t2d is dropped;
- `d2t` as ABSOLUTE target ids (`d2t + arange(N)`, I64): what llama.cpp reads. Every HF checkpoint and
  every other engine keep offsets (target = i + d2t[i]); in a GGUF, offsets are the bug.

`is_gguf` / `find_draft_gguf` / `draft_gguf` recognise one (asked by `helpers.io.layout` where names cannot
tell); `open_gguf` reads its metadata into an HF-style config (`draft_config_of`) and registers its tensors
under HF names in a `TensorStore`, lazily (memory-mapped by `gguf.GGUFReader`, q/k un-permuted, quantized
types dequantized when read); `helpers.io.checkpoint.open_checkpoint` calls it once and turns that into a
`Checkpoint` with `format == "gguf"` and `d2t_convention == "absolute"`.
`write_draft_gguf` writes a draft GGUF from HF-layout tensors and a config exactly as the converter
names, permutes and stores them; `copy_gguf` copies one with some tensors replaced (what `fix` uses).
Every problem with a file is one `BadInputError` naming it.
"""
from __future__ import annotations

import os
from functools import partial
from pathlib import Path

import numpy as np
import torch

from helpers.core.errors import BadInputError
from helpers.io.tensor_files import TensorStore, check_readable_file, short_message

GGUF_MAGIC = b"GGUF"
ARCH = "eagle3"
LLAMACPP_CONVENTION = "absolute"  # how llama.cpp reads the d2t of a GGUF: absolute target ids
CONVERTER = "convert_hf_to_gguf.py"

# llama.cpp's tensor names for an EAGLE-3 draft (conversion/llama.py: midlayer.* / layers.0.* become
# model.layers.0.*, then the llama tensor map) -> the kit's HF names (midlayer layout).
GGUF_TO_HF = {
    "token_embd.weight": "embed_tokens.weight",
    "fc.weight": "fc.weight",
    "output.weight": "lm_head.weight",
    "output_norm.weight": "norm.weight",
    "enc_output_norm.weight": "input_norm.weight",
    "blk.0.attn_norm.weight": "midlayer.input_layernorm.weight",
    "blk.0.attn_norm_2.weight": "midlayer.hidden_norm.weight",
    "blk.0.ffn_norm.weight": "midlayer.post_attention_layernorm.weight",
    "blk.0.attn_q.weight": "midlayer.self_attn.q_proj.weight",
    "blk.0.attn_k.weight": "midlayer.self_attn.k_proj.weight",
    "blk.0.attn_v.weight": "midlayer.self_attn.v_proj.weight",
    "blk.0.attn_output.weight": "midlayer.self_attn.o_proj.weight",
    "blk.0.ffn_gate.weight": "midlayer.mlp.gate_proj.weight",
    "blk.0.ffn_up.weight": "midlayer.mlp.up_proj.weight",
    "blk.0.ffn_down.weight": "midlayer.mlp.down_proj.weight",
    "d2t": "d2t",
}
HF_TO_GGUF = {v: k for k, v in GGUF_TO_HF.items()}


def gguf_name(hf_name: str) -> str | None:
    """llama.cpp's GGUF name for an HF draft tensor name (`midlayer.` / `layers.0.` / `model.` prefixes
    allowed), or None when the converter has no name for it (t2d: dropped)."""
    name = hf_name[len("model."):] if hf_name.startswith("model.") else hf_name
    if name.startswith("layers.0."):
        name = "midlayer." + name[len("layers.0."):]
    return HF_TO_GGUF.get(name)


def hf_name(gguf_tensor_name: str) -> str | None:
    """The kit's HF name (midlayer layout) for a GGUF draft tensor name, or None for a name it does not know."""
    return GGUF_TO_HF.get(gguf_tensor_name)


# -- q / k permutation (llama.cpp's RoPE layout) ---------------------------------------------------------
def permute_qk(w, n_head: int, n_head_kv: int | None = None):
    """The converter's `permute`: q with (n_head, n_head), k with (n_head, n_kv_head). numpy or torch."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    shape = tuple(w.shape)
    w = w.reshape(n_head, 2, shape[0] // n_head // 2, *shape[1:])
    return w.swapaxes(1, 2).reshape(shape)


def unpermute_qk(w, n_head: int, n_head_kv: int | None = None):
    """The inverse of `permute_qk`: a GGUF's attn_q / attn_k back in HF layout."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    shape = tuple(w.shape)
    w = w.reshape(n_head, shape[0] // n_head // 2, 2, *shape[1:])
    return w.swapaxes(1, 2).reshape(shape)


# -- recognising a GGUF --------------------------------------------------------------------------------
def is_gguf(path: str | os.PathLike) -> bool:
    """A local file named *.gguf or starting with the GGUF magic."""
    p = Path(path)
    if p.suffix.lower() == ".gguf":
        return True
    try:
        with open(p, "rb") as f:
            return f.read(4) == GGUF_MAGIC
    except OSError:
        return False


def find_draft_gguf(folder: str | os.PathLike) -> Path | None:
    """The one draft GGUF in a folder that holds no HF weights: None when it holds no .gguf; a folder with
    several picks the EAGLE-3 one (more than one: a `BadInputError` asking which)."""
    folder = Path(folder)
    try:
        ggufs = sorted(p for p in folder.iterdir() if p.suffix.lower() == ".gguf" and p.is_file())
    except OSError:
        return None
    if len(ggufs) <= 1:
        return ggufs[0] if ggufs else None
    drafts = [p for p in ggufs if _architecture(p) == ARCH]
    if len(drafts) == 1:
        return drafts[0]
    raise BadInputError(folder, f"holds {len(drafts) or len(ggufs)} {'EAGLE-3 ' if drafts else ''}GGUF files "
                        f"({', '.join(p.name for p in (drafts or ggufs))}): point at the one to use")


def draft_gguf(path: str | os.PathLike) -> Path | None:
    """The draft GGUF a local path is or holds: the file itself when it is a GGUF (`is_gguf`), the
    one draft GGUF of a folder (`find_draft_gguf`), else None."""
    p = Path(path)
    if p.is_dir():
        return find_draft_gguf(p)
    return p if is_gguf(p) else None


def _architecture(path: Path) -> str | None:
    try:
        return _field(read_gguf(path), "general.architecture")
    except BadInputError:
        return None


def read_gguf(path: str | os.PathLike):
    """A `gguf.GGUFReader` over `path` (memory-mapped), every failure one `BadInputError` naming the file."""
    import gguf

    path = Path(path)
    check_readable_file(path)
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise BadInputError(path, f"cannot be read ({e.strerror or e})") from None
    if magic != GGUF_MAGIC:
        raise BadInputError(path, "is not a GGUF file (no GGUF magic at its start)")
    try:
        reader = gguf.GGUFReader(path, "r")
    except Exception as e:  # noqa: BLE001 - the reader raises ValueError, IndexError, struct errors, ...
        raise BadInputError(path, f"not a readable GGUF file, truncated or corrupt ({type(e).__name__}: "
                            f"{short_message(str(e), 100)})") from None
    size = path.stat().st_size
    for t in reader.tensors:
        if int(t.data_offset) + int(t.n_bytes) > size:
            raise BadInputError(path, f"not a readable GGUF file: tensor {t.name!r} ends past the end of the file "
                                "(truncated file?)")
    return reader


def _field(reader, key: str):
    f = reader.fields.get(key)
    if f is None:
        return None
    try:
        v = f.contents()
    except Exception:  # noqa: BLE001
        return None
    return v


def _f32(v) -> float | None:
    """A float32 metadata value as its shortest decimal (1e-06, not 9.99999997e-07)."""
    return None if v is None else float(str(np.float32(v)))


# -- reading --------------------------------------------------------------------------------------------
def draft_config_of(reader, path: Path) -> dict:
    """The HF-style EAGLE-3 draft config a draft GGUF's metadata states (a `BadInputError` for a GGUF that
    is not an EAGLE-3 draft)."""
    arch = _field(reader, "general.architecture")
    if arch != ARCH:
        raise BadInputError(path, f"is a GGUF of architecture {arch!r}, not an EAGLE-3 draft "
                            f"(general.architecture = {ARCH!r}); is it the target?")
    g = lambda k: _field(reader, f"{ARCH}.{k}")  # noqa: E731
    hidden, heads = g("embedding_length"), g("attention.head_count")
    if not isinstance(hidden, int) or not isinstance(heads, int) or heads <= 0:
        raise BadInputError(path, "is an EAGLE-3 GGUF without eagle3.embedding_length / eagle3.attention.head_count")
    kv = g("attention.head_count_kv")
    kv = kv[0] if isinstance(kv, list) and kv else kv
    head_dim = g("attention.key_length") or g("rope.dimension_count") or hidden // heads
    names = {t.name: t for t in reader.tensors}
    d2t, out = names.get("d2t"), names.get("output.weight")
    draft_vocab = int(d2t.n_elements) if d2t is not None else (
        int(out.shape[1]) if out is not None and len(out.shape) == 2 else None)
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": g("feed_forward_length"),
        "num_attention_heads": heads,
        "num_key_value_heads": kv if isinstance(kv, int) else heads,
        "head_dim": head_dim,
        "num_hidden_layers": g("block_count") or 1,
        "hidden_act": "silu",
        "rms_norm_eps": _f32(g("attention.layer_norm_rms_epsilon")),
        "rope_theta": _f32(g("rope.freq_base")),
        "max_position_embeddings": g("context_length"),
        "vocab_size": g("vocab_size"),
        "draft_vocab_size": draft_vocab,
        "target_hidden_size": g("target_hidden_size") or hidden,
        "norm_before_residual": bool(g("norm_before_residual") or False),
        "norm_before_fc": bool(g("norm_before_fc") or False),
        "tie_word_embeddings": False,
    }
    layers = g("target_layers")
    if isinstance(layers, list):
        cfg["eagle_aux_hidden_state_layer_ids"] = [int(x) for x in layers]
    return {k: v for k, v in cfg.items() if v is not None}


_TORCH_OF = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
             "I8": torch.int8, "I16": torch.int16, "I32": torch.int32, "I64": torch.int64}


def _read_tensor(t, path: Path, permute: tuple[int, int] | None) -> torch.Tensor:
    """One GGUF tensor as a torch tensor in HF layout (numpy shape = reversed ne), un-permuted if asked."""
    import gguf

    kind = t.tensor_type.name
    shape = tuple(int(x) for x in reversed([int(n) for n in t.shape]))
    try:
        if kind == "BF16":
            raw = np.array(t.data).view(np.int16).reshape(shape)
            out = torch.from_numpy(raw).view(torch.bfloat16)
        elif kind in _TORCH_OF:
            out = torch.from_numpy(np.array(t.data).reshape(shape))
        else:  # a quantized type: dequantized to float32
            out = torch.from_numpy(np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
                                   .reshape(shape))
    except Exception as e:  # noqa: BLE001
        raise BadInputError(path, f"tensor {t.name!r} cannot be read ({type(e).__name__}: "
                            f"{short_message(str(e), 100)})") from None
    if permute is not None:
        out = unpermute_qk(out, *permute).contiguous()
    return out


def _dtype_of(t) -> torch.dtype:
    return _TORCH_OF.get(t.tensor_type.name, torch.float32)


def open_gguf(path: str | os.PathLike, store: TensorStore | None = None) -> tuple[dict, TensorStore]:
    """(the draft config, a `TensorStore` holding its tensors under HF names) for a draft GGUF; reads the
    metadata and tensor infos only (tensors are read when asked for, from the memory-mapped file)."""
    path = Path(path)
    reader = read_gguf(path)
    cfg = draft_config_of(reader, path)
    store = TensorStore() if store is None else store
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    unknown = [t.name for t in reader.tensors if t.name not in GGUF_TO_HF]
    if unknown:
        raise BadInputError(path, f"holds tensors an EAGLE-3 draft GGUF does not: {', '.join(unknown[:5])}")
    for t in reader.tensors:
        perm = (heads, heads) if t.name == "blk.0.attn_q.weight" else (heads, kv) if t.name == "blk.0.attn_k.weight" \
            else None
        shape = tuple(int(x) for x in reversed([int(n) for n in t.shape]))
        store.add_lazy(path, GGUF_TO_HF[t.name], shape, _dtype_of(t), partial(_read_tensor, t, path, perm))
    return cfg, store


def gguf_metadata(path: str | os.PathLike) -> dict:
    """Every metadata key of a GGUF with its value (token lists shortened to their length)."""
    reader = read_gguf(path)
    out = {}
    for k, f in reader.fields.items():
        if k.startswith("GGUF."):
            continue
        v = _field(reader, k)
        out[k] = f"[{len(v)} items]" if isinstance(v, list) and len(v) > 64 else v
    return out


# -- writing --------------------------------------------------------------------------------------------
OUTTYPES = ("f32", "f16", "bf16")


def _as_numpy(t) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        t = t.detach().cpu()
        if t.dtype.is_floating_point and t.dtype not in (torch.float16, torch.float32):
            t = t.to(torch.float32)  # the converter's cast of bf16 and other types
        return t.numpy()
    return np.asarray(t)


def absolute_d2t(d2t, target_vocab: int | None, where=None) -> np.ndarray:
    """The d2t a GGUF stores: `d2t + arange(N)` as int64, refused as the converter refuses it (an id out of
    the target vocab, or repeated)."""
    d = np.asarray(_as_numpy(d2t), dtype=np.int64).reshape(-1)
    ids = d + np.arange(d.shape[0], dtype=np.int64)
    if ids.size and (ids.min() < 0 or (target_vocab is not None and ids.max() >= target_vocab)):
        raise BadInputError(where, f"d2t as offsets gives target ids out of range (min {int(ids.min())}, max "
                            f"{int(ids.max())}, target vocab {target_vocab}): the converter refuses it")
    if np.unique(ids).size != ids.size:
        raise BadInputError(where, "d2t as offsets gives repeated target ids: the converter refuses it")
    return ids


def _flat(cfg: dict) -> dict:
    nested = cfg.get("transformer_layer_config")
    out = dict(nested) if isinstance(nested, dict) else {}
    out.update({k: v for k, v in cfg.items() if k != "transformer_layer_config" and k not in out})
    return out


def target_layers(draft_cfg: dict, target_cfg: dict) -> list[int]:
    """The converter's `eagle3.target_layers`: the draft config's top-level `eagle_aux_hidden_state_layer_ids`,
    else [2, L // 2, L - 3] of the target (nested `eagle_config` ids are not read)."""
    top = draft_cfg.get("eagle_aux_hidden_state_layer_ids")
    if isinstance(top, list) and top:
        return [int(x) for x in top]
    tc = target_cfg.get("text_config") if isinstance(target_cfg.get("text_config"), dict) else target_cfg
    n = int(tc["num_hidden_layers"])
    return [2, n // 2, n - 3]


def write_draft_gguf(out: str | os.PathLike, tensors: dict, config: dict, target_config: dict, *,
                     outtype: str = "f32", tokenizer_from: str | os.PathLike | None = None,
                     name: str | None = None, model_dir: str | os.PathLike | None = None) -> Path:
    """Write a draft GGUF from HF-layout `tensors` (names as any EAGLE-3 export has them; d2t as offsets)
    and the draft's `config` with its target's `target_config`, as llama.cpp's converter (the release read) writes it:
    its names, q/k permuted, float tensors as `outtype` (`f32`; `f16` / `bf16` for 2-D weights, norms and
    1-D tensors kept F32), d2t absolute I64, t2d dropped, its metadata keys in its order. `tokenizer_from`:
    a GGUF (the converted target) whose `tokenizer.*` keys are copied (none otherwise). `general.name` is
    `name`, else what gguf's Metadata makes of `model_dir` (the HF draft folder, as the converter reads
    it), else "Draft". Returns `out`."""
    import gguf

    if outtype not in OUTTYPES:
        raise ValueError(f"outtype must be one of {OUTTYPES}")
    cfg = _flat(config)
    tv = target_config.get("text_config") if isinstance(target_config.get("text_config"), dict) else target_config
    heads = int(cfg["num_attention_heads"])
    kv = int(cfg.get("num_key_value_heads") or heads)
    hidden = int(cfg["hidden_size"])
    ftype = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
             "bf16": gguf.LlamaFileType.MOSTLY_BF16}[outtype]
    qtype = {"f32": gguf.GGMLQuantizationType.F32, "f16": gguf.GGMLQuantizationType.F16,
             "bf16": gguf.GGMLQuantizationType.BF16}[outtype]
    out = Path(out)
    w = gguf.GGUFWriter(out, ARCH)
    w.add_array(f"{ARCH}.target_layers", target_layers(cfg, target_config))
    w.add_uint32(f"{ARCH}.target_hidden_size", int(cfg.get("target_hidden_size") or tv.get("hidden_size") or hidden))
    w.add_bool(f"{ARCH}.norm_before_residual", bool(cfg.get("norm_before_residual", False)))
    w.add_bool(f"{ARCH}.norm_before_fc", bool(cfg.get("norm_before_fc", False)))
    d2t_ids = None
    for key in sorted(tensors):  # the order of the HF file's (sorted) names; d2t last
        gname = gguf_name(key)
        if gname is None or gname == "d2t":
            if gname == "d2t":
                d2t_ids = absolute_d2t(tensors[key], tv.get("vocab_size"), out)
            continue
        data = _as_numpy(tensors[key])
        if gname == "blk.0.attn_q.weight":
            data = permute_qk(data, heads, heads)
        elif gname == "blk.0.attn_k.weight":
            data = permute_qk(data, heads, kv)
        data = np.ascontiguousarray(data, dtype=np.float32) if data.dtype != np.float16 else data.astype(np.float32)
        dq = gguf.GGMLQuantizationType.F32
        if data.ndim > 1 and not gname.endswith("_norm.weight"):
            dq = qtype
        w.add_tensor(gname, gguf.quants.quantize(data, dq) if dq != gguf.GGMLQuantizationType.F32 else data,
                     raw_dtype=dq)
    if d2t_ids is not None:
        w.add_tensor("d2t", d2t_ids, raw_dtype=gguf.GGMLQuantizationType.I64)
    total, shared, expert, count = w.get_total_parameter_count()
    meta = gguf.Metadata.load(None, Path(model_dir) if model_dir else None, name, total)
    if meta.name is None:
        meta.name = name or (Path(model_dir).name if model_dir else "Draft")
    if meta.size_label is None and total > 0:
        meta.size_label = gguf.size_label(total, shared, expert, count)
    w.add_type(gguf.GGUFType.MODEL)
    meta.set_gguf_meta_model(w)
    w.add_block_count(1)
    ctx = cfg.get("max_position_embeddings")
    if ctx is not None:
        w.add_context_length(int(ctx))
    w.add_embedding_length(hidden)
    if cfg.get("intermediate_size") is not None:
        w.add_feed_forward_length(int(cfg["intermediate_size"]))
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    if cfg.get("rope_theta") is not None:
        w.add_rope_freq_base(float(cfg["rope_theta"]))
    if cfg.get("rms_norm_eps") is not None:
        w.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
    if cfg.get("head_dim") is not None:
        w.add_key_length(int(cfg["head_dim"]))
        w.add_value_length(int(cfg["head_dim"]))
    w.add_file_type(ftype)
    w.add_vocab_size(int(tv["vocab_size"]))
    w.add_rope_dimension_count(int(cfg.get("head_dim") or hidden // heads))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    if tokenizer_from is not None:
        _copy_fields(read_gguf(tokenizer_from), w, lambda k: k.startswith("tokenizer."))
    _write(w, out)
    return out


def _copy_fields(reader, w, keep, values: dict | None = None) -> None:
    """Copy `reader`'s metadata keys for which `keep(key)` holds into writer `w`, with their types; a key in
    `values` is written with that value instead (its stored type kept)."""
    import gguf

    for k, f in reader.fields.items():
        if k.startswith("GGUF.") or not keep(k):
            continue
        vtype = gguf.GGUFValueType(f.types[0])
        sub = gguf.GGUFValueType(f.types[1]) if vtype == gguf.GGUFValueType.ARRAY and len(f.types) > 1 else None
        w.add_key_value(k, values[k] if values and k in values else f.contents(), vtype, sub_type=sub)


def _write(w, out: Path) -> None:
    try:
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
    finally:
        w.close()


_NUMPY_OF = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I8": np.int8, "I16": np.int16,
             "I32": np.int32, "I64": np.int64}


def _as_stored(arr, qtype):
    """(array, raw GGML type) to write `arr` as `qtype` (a `GGMLQuantizationType` or its name; None: by the
    array's numpy dtype): plain types cast, BF16 and quantized types quantized from float32."""
    import gguf

    arr = np.asarray(arr)
    if qtype is None:
        return np.ascontiguousarray(arr), None
    q = gguf.GGMLQuantizationType[qtype] if isinstance(qtype, str) else gguf.GGMLQuantizationType(qtype)
    if q.name in _NUMPY_OF:
        return np.ascontiguousarray(arr, dtype=_NUMPY_OF[q.name]), q
    if arr.dtype != np.uint8:  # numbers, not the stored bytes
        arr = gguf.quants.quantize(arr.astype(np.float32), q)
    return arr, q


def copy_gguf(src: str | os.PathLike, dst: str | os.PathLike, replace: dict, metadata: dict | None = None) -> Path:
    """Copy a GGUF to `dst`: every metadata key and tensor as stored (same types, same order), except the
    tensors named in `replace` (GGUF names): an array is written by its numpy dtype (I64 for int64), an
    (array, GGML type) pair as that type (`F32`, `BF16`, ...; quantized from the numbers where it is one), None
    leaves the tensor out. `metadata`: key -> value written in its stored type, None leaves the key out (a key
    the file lacks is a ValueError: its type is unknown). `src` is only read. The one place the kit writes a
    changed GGUF (`fix`, and the GGUF-level copies of scripts/engine_truth.py)."""
    import gguf

    src, dst = Path(src), Path(dst)
    reader = read_gguf(src)
    metadata = dict(metadata or {})
    unknown = [k for k in metadata if k not in reader.fields]
    if unknown:
        raise ValueError(f"{src} has no metadata key {', '.join(unknown)} to change")
    arch = metadata.get("general.architecture") or _field(reader, "general.architecture") or ARCH
    w = gguf.GGUFWriter(dst, arch)
    _copy_fields(reader, w, lambda k: k != "general.architecture" and not (k in metadata and metadata[k] is None),
                 metadata)
    for t in reader.tensors:
        if t.name in replace:
            new = replace[t.name]
            if new is None:
                continue
            arr, q = _as_stored(*new) if isinstance(new, tuple) else _as_stored(new, None)
            w.add_tensor(t.name, arr, raw_dtype=q)
        else:
            raw_shape = [int(x) for x in reversed([int(n) for n in t.shape])]
            w.add_tensor(t.name, np.array(t.data), raw_shape=raw_shape if t.tensor_type.name not in _TORCH_OF
                         and t.tensor_type.name != "BF16" else None, raw_dtype=t.tensor_type)
    _write(w, dst)
    return dst


def stored_tensor(path: str | os.PathLike, name: str) -> np.ndarray | None:
    """A GGUF tensor as stored (numpy, shape = reversed ne; quantized and BF16 types as their bytes), or None."""
    t = next((t for t in read_gguf(path).tensors if t.name == name), None)
    return None if t is None else np.array(t.data)


def stored_d2t(path: str | os.PathLike) -> np.ndarray | None:
    """The d2t a GGUF stores (int64, as llama.cpp reads it: absolute ids), or None."""
    reader = read_gguf(path)
    t = next((t for t in reader.tensors if t.name == "d2t"), None)
    return None if t is None else np.array(t.data, dtype=np.int64).reshape(-1)


def converter_command(draft: str | os.PathLike, target: str | os.PathLike | None = None,
                      out: str | os.PathLike | None = None) -> str:
    """The llama.cpp converter's command line that makes a draft GGUF from an HF draft folder."""
    out = out or (Path(draft).name + ".gguf")
    return (f"python {CONVERTER} {os.fspath(draft)} --target-model-dir {os.fspath(target) if target else 'TARGET_DIR'} "
            f"--outfile {os.fspath(out)}")
