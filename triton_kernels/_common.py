"""Helpers shared by the launchers: interpreter detection, bit-exact dtype views, block sizes,
the device guard of every launch, the kernels' sentinels."""
from __future__ import annotations

import contextlib
import os
from typing import Optional

import torch

import triton
import triton.language as tl

# Re-exported for the launchers: "no bad index" in the kernels' int64 flag, and the raw-bits
# view they move data through.
from .._tables import NO_ERROR as NO_VIOLATION  # noqa: F401
from .._tables import bits_view  # noqa: F401

#: ``NO_VIOLATION`` inside the kernels (a jitted function reads only ``tl.constexpr`` globals).
NO_VIOLATION_K: tl.constexpr = tl.constexpr(NO_VIOLATION)
#: The int64 limits inside the kernels (top-k's worst keys).
INT64_MAX: tl.constexpr = tl.constexpr(2**63 - 1)
INT64_MIN: tl.constexpr = tl.constexpr(-2**63)

#: Whether triton runs its kernels in its CPU interpreter: read once, at import (triton itself
#: reads ``TRITON_INTERPRET`` when it is imported, so a later change would not take effect).
INTERPRETING = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def launch_guard(t: torch.Tensor):
    """The context every kernel launch runs in: the CUDA device of ``t`` made current, so the
    kernel runs on that device and on its current stream (triton launches on the current
    device's current stream; a custom op's Python kernel gets no device guard from the
    dispatcher, so a tensor on ``cuda:1`` would otherwise launch on whatever device is current).
    A no-op for the interpreter's CPU tensors."""
    if t.device.type == "cuda":
        return torch.cuda.device(t.device.index)
    return contextlib.nullcontext()


def refuse_capture(op: str, t: torch.Tensor) -> None:
    """A checked call reads its violation flag on the host, which a CUDA graph cannot capture:
    refuse it during capture with a clear message (instead of the capture failing later)."""
    if t.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        raise RuntimeError(
            f"{op}: check_indices=True reads a violation flag on the host (one sync per call), "
            f"which cannot run while a CUDA graph is being captured; pass check_indices=False "
            f"inside CUDA graphs (out-of-range index tuples then read zeros / write nothing) "
            f"and check the indices outside the graph if needed")


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def merged_stride(shape, strides):
    """The single stride of a run of dimensions if they can be walked as one, else ``None``.

    A run with an empty dimension holds no element: any stride walks it (torch gives such
    dimensions strides that do not chain, and a ``None`` here reached the kernel as a stride).
    """
    if 0 in shape:
        return 1
    dims = [(s, st) for s, st in zip(shape, strides) if s != 1]
    if not dims:
        return 1
    for (s0, st0), (s1, st1) in zip(dims, dims[1:]):
        if st0 != st1 * s1:
            return None
    return dims[-1][1]


def tuple_blocks(n_tuples: int, slice_len: int, max_block: Optional[int]):
    """(BLOCK_T, BLOCK_S) for the gather/scatter kernels' 2-D grid of tuples x slice elements.

    About ``max_block`` elements per program (tests lower it to exercise many programs and
    partial blocks); the slice axis of the grid is limited to 65535 programs.
    """
    budget = max_block or (8192 if INTERPRETING else 2048)
    block_s = max(1, min(next_pow2(slice_len), budget, 1024))
    if triton.cdiv(slice_len, block_s) > 65535:
        block_s = next_pow2(triton.cdiv(slice_len, 65535))
    block_t = max(1, min(next_pow2(n_tuples), max(1, budget // block_s)))
    return block_t, block_s


@triton.jit
def tuple_offsets(idx_ptr, sizes, strides, offs_t, mask_t, K: tl.constexpr, SIGNED: tl.constexpr):
    """Offsets of a block of index tuples: ``(off, ok, first_bad)``, each [BLOCK_T].

    ``idx_ptr`` holds K coordinates per tuple; ``sizes`` and ``strides`` are tuples of K scalar
    kernel arguments (the K dimension sizes and their strides): passed by value at launch, so a
    launch needs no host-to-device copy of them.  ``off`` is sum(coordinate * stride) with negative coordinates of a SIGNED
    type wrapped and out-of-range ones counted as 0 (so it never points outside the tensor),
    ``ok`` says every coordinate is in range, ``first_bad`` is the smallest flat position
    (tuple * K + j) of an out-of-range coordinate (int64 max if none).
    """
    off = tl.zeros_like(offs_t)
    ok = mask_t
    first_bad = tl.full(offs_t.shape, NO_VIOLATION_K, tl.int64)
    for j in tl.static_range(K):
        size = sizes[j]
        stride = strides[j]
        # int64 before any multiply: tensors may exceed 2**31 elements
        c = tl.load(idx_ptr + offs_t * K + j, mask=mask_t, other=0).to(tl.int64)
        if SIGNED:
            c = tl.where(c < 0, c + size, c)     # spec: negative indices count from the end
        bad = ((c < 0) | (c >= size)) & mask_t
        ok = ok & (bad == 0)
        first_bad = tl.minimum(first_bad, tl.where(bad, offs_t * K + j, NO_VIOLATION_K))
        off += tl.where(bad, 0, c) * stride
    return off, ok, first_bad
