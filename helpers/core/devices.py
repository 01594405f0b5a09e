"""Devices and dtypes: which accelerator to run on, how much memory it has free, dtype names.

`get_device` picks cuda, then mps, then cpu; `resolve_device` turns a user's `--device` into a
`torch.device` or one `BadInputError` line; `default_dtype` is bf16 on cuda and fp32 elsewhere;
`parse_dtype` reads 'bf16' / 'float32' / a torch dtype; `available_bytes` says how much memory a
device has free. Torch only: nothing here reads checkpoints or samples.
"""
from __future__ import annotations

import torch

from helpers.core.errors import BadInputError

_DTYPES = {
    "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
}


def parse_dtype(dtype) -> torch.dtype | None:
    """'bf16' / 'float32' / torch.bfloat16 / None -> torch dtype (None keeps the loader's default)."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    key = str(dtype).lower().removeprefix("torch.")
    if key not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {sorted(_DTYPES)}")
    return _DTYPES[key]


def get_device() -> torch.device:
    """cuda, then mps, then cpu."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def resolve_device(device=None) -> torch.device:
    """`device` as a torch.device (None: `get_device()`); a one-line BadInputError when it is not
    a device name or not present on this machine."""
    if device is None or device == "":
        return get_device()
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise BadInputError(None, f"--device {device!r} is not a device name ({e}); use cpu, cuda, cuda:N or mps") from None
    present = {
        "cpu": True,
        "cuda": torch.cuda.is_available() and (dev.index is None or dev.index < torch.cuda.device_count()),
        "mps": bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()),
    }.get(dev.type, False)
    if not present:
        raise BadInputError(None, f"device {device!r} is not available on this machine (have: {get_device()})")
    return dev


def default_dtype(device) -> torch.dtype:
    """bf16 on cuda, fp32 elsewhere."""
    return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32


def available_bytes(device) -> int | None:
    """Free memory on `device` (cuda: mem_get_info; cpu: MemAvailable / psutil), None if unknown."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    if device.type == "cpu":
        try:
            import psutil

            return int(psutil.virtual_memory().available)
        except ImportError:
            pass
        try:
            with open("/proc/meminfo") as f:
                for line in f:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None
    return None
