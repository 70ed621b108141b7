"""Helpers shared by the launchers: interpreter detection, bit-exact dtype views, block sizes."""
from __future__ import annotations

import os

import torch

#: Sentinel of "no violation" in the int64 flag the kernels use to report a bad index position.
NO_VIOLATION = 2**63 - 1

_SAME_WIDTH_INT = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def interpreting() -> bool:
    """Whether triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def bits_view(t: torch.Tensor) -> torch.Tensor:
    """The tensor reinterpreted as a signed integer of the same width.

    Data-movement kernels copy bits; one integer kernel per width serves every dtype (bool, fp16,
    bf16, uint16 ...) bit-exactly, NaN payloads included, and the interpreter needs no float16 or
    bfloat16 support for it.
    """
    if t.dtype == torch.bool:
        return t.view(torch.uint8).view(torch.int8)
    return t.view(_SAME_WIDTH_INT[t.element_size()])


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def merged_stride(shape, strides):
    """The single stride of a run of dimensions if they can be walked as one, else ``None``."""
    dims = [(s, st) for s, st in zip(shape, strides) if s != 1]
    if not dims:
        return 1
    for (s0, st0), (s1, st1) in zip(dims, dims[1:]):
        if st0 != st1 * s1:
            return None
    return dims[-1][1]
