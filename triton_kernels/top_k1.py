"""Stable top-k in Triton: unique composite keys, bitonic selection, and merge stages for long rows.

Every element becomes one int64 key: its value mapped to an order-preserving int32 (NaN above
+inf, -0.0 equal to +0.0) in the high half, its index in the low half (inverted when selecting
the largest), so all keys are distinct and any correct selection of the k best keys is DirectML's
stable answer, whatever order the selection network compares them in.  A row that fits in one
block is selected from once (one pass); a longer row is cut into blocks whose k best keys are kept, and the kept
keys are merged by the same kernel until they fit in one block.
"""
from __future__ import annotations

import functools
from typing import Optional

import torch
import triton
import triton.language as tl

from ..portable.top_k1 import make_kernels, top_k1_torch
from ._common import (INT64_MAX, INT64_MIN, bits_view, cdiv, fits32, launch, launch_guard, next_pow2,
                      vec_width)

# value-to-key parameters per dtype: (INF bits, abs mask) for floats; (0, zero-extension mask)
# for unsigned integers narrower than 32 bits; FLIP for uint32.
_FLOAT = {torch.float32: (0x7F800000, 0x7FFFFFFF), torch.float16: (0x7C00, 0x7FFF),
          torch.bfloat16: (0x7F80, 0x7FFF)}
_UNSIGNED_MASK = {torch.uint8: 0xFF, torch.bool: 0xFF, torch.uint16: 0xFFFF}
_SIGNED = (torch.int8, torch.int16, torch.int32)
MAX_BLOCK = 4096
#: Keys per program (a row longer than this goes through merge stages).
DEFAULT_BLOCK = 1024
#: The longest row the composite key can index: positions 0 .. 2**32 - 1 fill its low 32 bits.
MAX_ROW = 2**32


#: Whether this triton has ``tl.topk`` (a bitonic selection: it sorts groups of KP keys and
#: keeps the better half of each pair of groups, never sorting the whole block).  Without it a
#: block is sorted whole.
HAS_TOPK = hasattr(tl, "topk")


@triton.jit(do_not_specialize=["n", "k", "n_out_per_row"])
def _top_k1_kernel(
    x_ptr, keys_in_ptr, keys_out_ptr, vals_out_ptr, idx_out_ptr,
    n, k, n_out_per_row,
    IS_FLOAT: tl.constexpr, INF_BITS: tl.constexpr, ABS_MASK: tl.constexpr,
    ZEXT_MASK: tl.constexpr, FLIP: tl.constexpr,
    DESC: tl.constexpr, FROM_KEYS: tl.constexpr, FINAL: tl.constexpr, BLOCK: tl.constexpr,
    KP: tl.constexpr, SELECT: tl.constexpr, VEC: tl.constexpr,
):
    """One program: block ``pid % n_blocks`` of BLOCK keys of row ``pid // n_blocks`` -> its k
    best keys, sorted (n_blocks = cdiv(n, BLOCK)).

    Grid: (rows * n_blocks,): one flat axis, since a long row's block count would overflow a
    second grid axis (65535 programs on CUDA).  ``n`` is at most
    ``MAX_ROW`` (the index fills the key's low 32 bits).  ``x`` is [rows, n_x] (bits of the
    data, contiguous rows),
    ``keys_in`` [rows, n] int64 (FROM_KEYS).  Not FINAL: writes min(k, BLOCK) keys per block to
    ``keys_out`` [rows, n_out_per_row].  FINAL (one block per row): decodes the k best keys into
    indices and values (read back from ``x``, so the value bits are exact).

    Selection: KP (the power of two at or above k, at most BLOCK) best keys; KP = 1 is a max
    reduction, SELECT a ``tl.topk``, else a sort of the whole block.  Selecting the smallest
    keys is selecting the largest of their bitwise complements (order-reversing, no overflow).
    ``n``, ``k`` and ``n_out_per_row`` are not specialised: another k of the same power-of-two
    bucket, or another row length, reuses the compiled kernel; VEC says ``n`` is a multiple of
    VEC and the data 16-byte aligned, so rows load in 16-byte words.
    """
    if VEC > 1:
        n = (n // VEC) * VEC      # = n: tells the compiler VEC divides it
    pid = tl.program_id(0).to(tl.int64)
    n_blocks = (n + BLOCK - 1) // BLOCK
    row = pid // n_blocks
    blk = pid % n_blocks
    offs = blk * BLOCK + tl.arange(0, BLOCK)                                  # [BLOCK]
    mask = offs < n
    if DESC:
        worst = INT64_MIN
    else:
        worst = INT64_MAX
    if FROM_KEYS:
        keys = tl.load(keys_in_ptr + row * n + offs, mask=mask, other=worst)
    else:
        b = tl.load(x_ptr + row * n + offs, mask=mask, other=0).to(tl.int32)
        if IS_FLOAT:
            mag = b & ABS_MASK
            v = tl.where(b < 0, -mag, mag)                 # sign-magnitude -> ordered; -0 == +0
            v = tl.where(mag > INF_BITS, 2147483647, v)    # every NaN above +inf, all equal
        elif ZEXT_MASK != 0:
            v = b & ZEXT_MASK
        elif FLIP:
            v = b ^ (-2147483647 - 1)                       # uint32 order as int32
        else:
            v = b
        if DESC:
            low = 4294967295 - offs                         # lower index -> larger key
        else:
            low = offs
        keys = (v.to(tl.int64) << 32) | low
        keys = tl.where(mask, keys, worst)
    if DESC:
        sel = keys
    else:
        sel = ~keys
    if KP == 1:
        top = tl.full([1], 0, tl.int64) + tl.max(sel, axis=0)                # [1]
        o = tl.arange(0, 1)
    elif SELECT:
        top = tl.topk(sel, KP)                                                # [KP], best first
        o = tl.arange(0, KP)
    else:
        top = tl.sort(sel, descending=True)                                   # [BLOCK]
        o = tl.arange(0, BLOCK)
    if DESC:
        keys = top
    else:
        keys = ~top
    take = o < k
    if FINAL:
        low = keys & 4294967295
        if DESC:
            idx = 4294967295 - low
        else:
            idx = low
        tl.store(idx_out_ptr + row * k + o, idx, mask=take)
        vals = tl.load(x_ptr + row * n_out_per_row + idx, mask=take, other=0)
        tl.store(vals_out_ptr + row * k + o, vals, mask=take)
    else:
        tl.store(keys_out_ptr + row * n_out_per_row + blk * k + o, keys, mask=take)


def top_k1_triton_supports(dtype: torch.dtype, k: int, n: Optional[int] = None) -> bool:
    """Whether the kernel runs this call: 32-bit and narrower dtypes (the composite key needs the
    value in 32 bits: not int64, uint64, float64), k up to half the largest block (each merge
    stage must shrink the candidates), and rows of ``n`` (the length along the axis) up to
    ``MAX_ROW`` elements (the key's other 32 bits hold the index).  ``n=None``: the row length
    is not known here; ``top_k1_triton`` then refuses a row too long itself."""
    ok_dtype = dtype in _FLOAT or dtype in _UNSIGNED_MASK or dtype in _SIGNED or dtype == torch.uint32
    return ok_dtype and 2 * k <= MAX_BLOCK and (n is None or n <= MAX_ROW)


@functools.lru_cache(maxsize=1024)
def _stages(rows: int, n: int, k: int, dtype: torch.dtype, largest: bool,
            max_block: Optional[int]) -> tuple:
    """The launches of one call layout, computed once: per stage (block count of candidates
    kept per row or 0 for the final stage, grid, launch key, positional scalars, constexprs)."""
    # a stage keeps k of every block: blocks of at least 2k halve the candidates each round
    block = max(max_block or DEFAULT_BLOCK, next_pow2(2 * k))
    inf_bits, abs_mask = _FLOAT.get(dtype, (0, 0))
    base = dict(IS_FLOAT=dtype in _FLOAT, INF_BITS=inf_bits, ABS_MASK=abs_mask,
                ZEXT_MASK=_UNSIGNED_MASK.get(dtype, 0), FLIP=dtype == torch.uint32,
                DESC=largest)
    element_size = dtype.itemsize
    stages = []

    def stage(cur_n, blk, from_keys, final, n_out_per_row):
        consts = dict(base, FROM_KEYS=from_keys, FINAL=final, BLOCK=blk,
                      KP=min(next_pow2(k), blk), SELECT=HAS_TOPK,
                      VEC=vec_width(8 if from_keys else element_size, cur_n))
        warps = 8 if blk >= 2048 else 4
        key = ("top_k1", dtype, fits32(cur_n, k, n_out_per_row), tuple(consts.values()), warps)
        kept = 0 if final else n_out_per_row
        stages.append((kept, (rows * cdiv(cur_n, blk),), key, (cur_n, k, n_out_per_row), consts,
                       warps))

    if n <= block:
        stage(n, next_pow2(max(n, 2)), False, True, n)
    else:
        cur_n, from_keys = n, False
        while cur_n > block:
            kept = cdiv(cur_n, block) * k
            stage(cur_n, block, from_keys, False, kept)
            cur_n, from_keys = kept, True
        stage(cur_n, next_pow2(max(cur_n, 2)), True, True, n)
    return tuple(stages)


def top_k1_triton(input: torch.Tensor, k: int, axis: int, largest: bool,
                  index_dtype: torch.dtype, max_block: Optional[int] = None):
    """Values and indices of the k best along ``axis`` (laid out like ``input``)."""
    n = input.shape[axis]
    if not top_k1_triton_supports(input.dtype, k, n):
        raise ValueError(
            f"top_k1_triton: InputTensor (dtype {input.dtype}, {n} elements along axis {axis}) "
            f"with k={k} is not supported by the kernel: it needs a dtype of at most 32 bits, "
            f"2 * k <= {MAX_BLOCK} and at most {MAX_ROW} elements along the axis (check "
            f"top_k1_triton_supports first)")
    last = axis == input.dim() - 1
    xm = (input if last else input.movedim(axis, -1)).contiguous()
    rows = xm.numel() // n if n else 0
    out_shape = xm.shape[:-1] + (k,)
    vals = torch.empty(out_shape, dtype=input.dtype, device=input.device)
    idx = torch.empty(out_shape, dtype=torch.int64, device=input.device)
    if rows:
        x2 = bits_view(xm).view(rows, n)
        v2, i2 = bits_view(vals).view(rows, k), idx.view(rows, k)
        aligned = x2.data_ptr() % 16 == 0
        keys = x2
        with launch_guard(x2):
            for kept, grid, key, scalars, consts, warps in _stages(rows, n, k, input.dtype,
                                                                   largest, max_block):
                if not aligned and not consts["FROM_KEYS"] and consts["VEC"] > 1:
                    consts, key = dict(consts, VEC=1), key + ("unaligned",)
                out = torch.empty((rows, kept), dtype=torch.int64, device=input.device) \
                    if kept else keys
                launch(_top_k1_kernel, grid, key, (x2, keys, out, v2, i2),
                       (x2, keys, out, v2, i2, *scalars), consts, num_warps=warps)
                keys = out
    if index_dtype != torch.int64:
        idx = idx.to(index_dtype)
    if last:
        return vals, idx
    return vals.movedim(-1, axis).contiguous(), idx.movedim(-1, axis).contiguous()


# ---------------------------------------------------------------------------------------------
# The op kernel (CUDA dispatch key; the CPU key under backend("triton") with the interpreter)
# ---------------------------------------------------------------------------------------------

def _compute(input, k, axis, largest, index_dtype):
    """The Triton kernel where ``top_k1_triton_supports`` says it covers the call (dtype, k and
    the row length of its 32-bit index field), else the portable path."""
    if top_k1_triton_supports(input.dtype, k, input.shape[axis]):
        return top_k1_triton(input, k, axis, largest, index_dtype)
    return top_k1_torch(input, k, axis, largest, index_dtype)


def _kernels() -> dict:
    return make_kernels(_compute)


KERNELS = _kernels()
