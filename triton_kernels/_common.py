"""Helpers shared by the launchers: interpreter detection, bit-exact dtype views, block sizes,
the device guard of every launch, the kernels' sentinels."""
from __future__ import annotations

import contextlib
import os
from typing import Optional

import torch

import triton
import triton.language as tl
from triton.compiler.compiler import CompiledKernel

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


#: The compiled variant of each launch seen: (launcher's key, pointer alignments, device) ->
#: (triton's CompiledKernel, the constexpr values in parameter order).  Bounded: cleared when
#: it grows past ``_MAX_COMPILED`` entries (a launch then goes through the JIT again).
_COMPILED: dict = {}
_MAX_COMPILED = 4096


def launch(kernel, grid: tuple, key, tensors: tuple, args: tuple, consts: dict,
           **options) -> None:
    """``kernel[grid](*args, **consts, **options)``; after a variant's first launch, straight
    through triton's compiled kernel, skipping the JIT's binding of every argument (most of a
    small call's host time: M9 in docs/benchmarks.md, "Measured choices").

    ``key`` must determine everything triton specialises on apart from pointer alignment (added
    here from ``tensors``, the pointer arguments) and the device: the constexprs, the options,
    the dtypes of the pointers and whether each integer argument fits in 32 bits (the kernels
    leave every integer argument unspecialised, so that is all triton looks at).  The
    ``triton_variants`` tests check that the variant found here is the one the JIT would pick.
    ``consts`` lists the constexprs in parameter order, after the positional ``args``.
    """
    if INTERPRETING:
        kernel[grid](*args, **consts, **options)
        return
    full = (key, tuple(t.data_ptr() % 16 == 0 for t in tensors), torch.cuda.current_device())
    hit = _COMPILED.get(full)
    if hit is None:
        compiled = kernel[grid](*args, **consts, **options)
        if isinstance(compiled, CompiledKernel):
            if len(_COMPILED) >= _MAX_COMPILED:
                _COMPILED.clear()
            _COMPILED[full] = (compiled, tuple(consts.values()))
        return
    compiled, values = hit
    compiled[(grid[0], grid[1] if len(grid) > 1 else 1, 1)](*args, *values)


def fits32(*values: int) -> tuple:
    """Whether each integer binds as a 32-bit kernel argument (triton's i32) or a 64-bit one."""
    return tuple(-2**31 <= v < 2**31 for v in values)


def refuse_capture(op: str, t: torch.Tensor) -> None:
    """A checked call reads its violation flag on the host, which a CUDA graph cannot capture:
    refuse it during capture with a clear message (instead of the capture failing later)."""
    if t.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        raise RuntimeError(
            f"{op}: check_indices=True reads a violation flag on the host (one sync per call), "
            f"which cannot run while a CUDA graph is being captured; pass check_indices=False "
            f"inside CUDA graphs (out-of-range index tuples then read zeros / write nothing) "
            f"and check the indices outside the graph if needed")


def reshaped(t: torch.Tensor, shape) -> torch.Tensor:
    """``t.reshape(shape)``, without the call when ``t`` has that shape already."""
    return t if t.shape == shape else t.reshape(shape)


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) on the host (``triton.cdiv`` is a jitted function: slower to call)."""
    return -(-a // b)


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


#: Index tuples per program at most: with the default 4 warps, 4 per thread, which keeps an
#: element gather or scatter of up to 8 coordinates in registers (no spills; compile tests).
MAX_BLOCK_T = 512


def tuple_blocks(slice_len: int, max_block: Optional[int], element_size: int = 4):
    """(BLOCK_T, BLOCK_S) for the gather/scatter kernels' 2-D grid of tuples x slice elements.

    About 8 KiB of data per program (64 bytes per thread of 4 warps), or ``max_block`` elements
    (tests lower it to exercise many programs and partial blocks); the slice axis of the grid is
    limited to 65535 programs.  The blocks depend on the slice length alone (a power-of-two
    bucket of it) and the element size, never on the number of tuples: a call with another count
    of tuples reuses the compiled kernel.
    """
    budget = max_block or (8192 if INTERPRETING else 8192 // element_size)
    block_s = max(1, min(next_pow2(slice_len), budget, 1024))
    if cdiv(slice_len, block_s) > 65535:
        block_s = next_pow2(cdiv(slice_len, 65535))
    cap = MAX_BLOCK_T if max_block is None and not INTERPRETING else budget
    block_t = max(1, min(budget // block_s, cap))
    return block_t, block_s


#: Index tuples of at most this many coordinates (DirectML's tensors have at most 8 dimensions;
#: longer tuples, which the permissive level allows, take the portable path): the kernels take
#: the indexed sizes and strides as this many separate scalar arguments, which triton's JIT can
#: leave unspecialised (it specialises the items of a tuple argument, whatever
#: ``do_not_specialize`` says).
MAX_K = 8


def dims8(values) -> tuple:
    """``values`` (at most ``MAX_K`` ints) padded with zeros to ``MAX_K`` kernel arguments."""
    values = tuple(int(v) for v in values)
    if len(values) > MAX_K:
        raise ValueError(f"the Triton kernels index at most {MAX_K} dimensions, got {len(values)}")
    return values + (0,) * (MAX_K - len(values))


def vec_width(element_size: int, slice_len: int, *offsets: int, tensors=()) -> int:
    """How many elements of a row start on a 16-byte boundary together: the largest power of two
    ``v`` (at most 16 bytes of elements) dividing ``slice_len`` and every element offset a row
    start is made of (strides), with every tensor's data 16-byte aligned; 1 when none.  The
    kernels promise the compiler that row starts are multiples of it (``tl.multiple_of``), which
    lets it move rows in 16-byte words."""
    if any(t.data_ptr() % 16 for t in tensors):
        return 1
    v = max(1, 16 // element_size)
    for n in (slice_len, *offsets):
        while v > 1 and n % v:
            v //= 2
    return v


@triton.jit
def tuple_offsets(idx_ptr, sizes, strides, offs_t, mask_t, K: tl.constexpr, SIGNED: tl.constexpr):
    """Offsets of a block of index tuples: ``(off, ok, first_bad)``, each [BLOCK_T].

    ``idx_ptr`` holds K coordinates per tuple; ``sizes`` and ``strides`` are tuples of the
    kernel's scalar arguments (the K dimension sizes and their strides, then padding): passed by
    value at launch, so a launch needs no host-to-device copy of them.  ``off`` is sum(coordinate * stride) with
    negative coordinates of a SIGNED type wrapped and out-of-range ones counted as 0 (so it never
    points outside the tensor), ``ok`` says every coordinate is in range, ``first_bad`` is the
    smallest flat position (tuple * K + j) of an out-of-range coordinate (int64 max if none).
    """
    off = tl.zeros_like(offs_t)
    first_j = tl.full(offs_t.shape, K, tl.int32)     # the first bad coordinate of each tuple
    for j in tl.static_range(K):
        size = sizes[j]
        stride = strides[j]
        # int64 before any multiply: tensors may exceed 2**31 elements
        c = tl.load(idx_ptr + offs_t * K + j, mask=mask_t, other=0).to(tl.int64)
        if SIGNED:
            c = tl.where(c < 0, c + size, c)     # spec: negative indices count from the end
        bad = (c < 0) | (c >= size)
        first_j = tl.where(bad & (first_j == K), j, first_j)
        off += tl.where(bad, 0, c) * stride
    ok = mask_t & (first_j == K)
    first_bad = tl.where(mask_t & (first_j < K), offs_t * K + first_j, NO_VIOLATION_K)
    return off, ok, first_bad
