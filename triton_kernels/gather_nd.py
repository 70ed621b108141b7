"""GatherND as one Triton kernel: a program moves BLOCK_T whole slices (or BLOCK_S-wide pieces of them)."""
from __future__ import annotations

import math
from typing import Optional

import torch
import triton
import triton.language as tl

from .._checks import raise_index_error
from .._forms import row_major_strides
from .._tables import SIGNED_INDEX_DTYPES
from ..portable.gather_nd import gather_nd_backward, gather_nd_torch, make_kernels
from ._common import (MAX_K, NO_VIOLATION, NO_VIOLATION_K, bits_view, cdiv, dims8, fits32, launch,
                      launch_guard, merged_stride, refuse_capture, reshaped, tuple_blocks,
                      tuple_offsets, vec_width)


@triton.jit(do_not_specialize=["n_tuples", "per_batch", "slice_len", "stride_in_batch",
                               "stride_in_slice", "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7",
                               "t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"])
def _gather_nd_kernel(
    out_ptr, in_ptr, idx_ptr, s0, s1, s2, s3, s4, s5, s6, s7, t0, t1, t2, t3, t4, t5, t6, t7,
    flag_ptr,
    n_tuples, per_batch, slice_len, stride_in_batch, stride_in_slice,
    K: tl.constexpr, SIGNED: tl.constexpr, CHECK: tl.constexpr, MOVE: tl.constexpr,
    HAS_BATCH: tl.constexpr, UNIT_SLICE: tl.constexpr, VEC: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_S: tl.constexpr,
):
    """One program: tuples [pid_t*BLOCK_T, +BLOCK_T) x slice elements [pid_s*BLOCK_S, +BLOCK_S).

    Grid: (cdiv(n_tuples, BLOCK_T), cdiv(slice_len, BLOCK_S)).  ``s0..s7``/``t0..t7``: the K
    indexed dimension sizes and their element strides (then zeros), as scalar arguments.  A tuple
    with a coordinate out of range reads nothing and writes zeros; with CHECK the smallest flat
    position of such a coordinate is recorded in ``flag_ptr`` (a relaxed atomic min: the host
    reads it after the kernel), which the launcher's caller turns into an IndexError.
    MOVE=False only checks (a pre-pass that keeps a caller's ``out=`` untouched on failure).

    Sizes and strides are not specialised (a new size reuses the compiled kernel); what the
    compiler needs to know comes as constexprs: HAS_BATCH (else no division by ``per_batch``),
    UNIT_SLICE (slice elements adjacent), VEC (every row start, in and out, is a multiple of VEC
    elements from 16-byte aligned data: rows move in 16-byte words).
    """
    pid_t = tl.program_id(0)
    pid_s = tl.program_id(1)
    offs_t = pid_t.to(tl.int64) * BLOCK_T + tl.arange(0, BLOCK_T)          # [BLOCK_T]
    mask_t = offs_t < n_tuples
    off, ok, first_bad = tuple_offsets(idx_ptr, (s0, s1, s2, s3, s4, s5, s6, s7),
                                  (t0, t1, t2, t3, t4, t5, t6, t7), offs_t, mask_t, K, SIGNED)
    if HAS_BATCH:
        src = (offs_t // per_batch) * stride_in_batch + off                 # [BLOCK_T] int64
    else:
        src = off
    if CHECK:
        b_first = tl.min(first_bad, axis=0)
        tl.atomic_min(flag_ptr, b_first, mask=(pid_s == 0) & (b_first < NO_VIOLATION_K),
                      sem="relaxed")
    if MOVE:
        if VEC > 1:
            slice_len = (slice_len // VEC) * VEC     # = slice_len: tells the compiler VEC divides it
        offs_s = pid_s.to(tl.int64) * BLOCK_S + tl.arange(0, BLOCK_S)        # [BLOCK_S]
        mask_s = offs_s < slice_len
        dst = offs_t * slice_len
        if VEC > 1:
            src = (src // VEC) * VEC     # = src: tells the compiler VEC divides it (multiple_of
            # on a computed offset is not kept by every triton: 3.6 drops it)
        if UNIT_SLICE:
            src_s = offs_s
        else:
            src_s = offs_s * stride_in_slice
        b_vals = tl.load(in_ptr + src[:, None] + src_s[None, :],
                         mask=ok[:, None] & mask_s[None, :], other=0)       # [BLOCK_T, BLOCK_S]
        tl.store(out_ptr + dst[:, None] + offs_s[None, :], b_vals,
                 mask=mask_t[:, None] & mask_s[None, :])


#: Launch plans by call layout (everything a plan derives from shapes, strides and dtypes):
#: a repeated layout skips the host arithmetic.  Bounded like ``_common._COMPILED``.
_PLANS: dict = {}


def _plan(shape, strides, k, n_tuples, b, element_size, idx_dtype, check, move, max_block):
    """What a launch of this layout needs: ``None`` when it launches nothing, else (copy the
    input first, grid, the scalar arguments, the constexprs with VEC for aligned data, the
    launch key)."""
    index_sizes = shape[b: b + k]
    batch = math.prod(shape[:b])
    slice_len = math.prod(shape[b + k:])
    if n_tuples == 0 or ((slice_len == 0 or not move) and not check):
        return None
    stride_b = merged_stride(shape[:b], strides[:b])
    stride_s = merged_stride(shape[b + k:], strides[b + k:])
    copy = False
    if 0 in shape:
        # Nothing is read (every tuple is out of range, or the slices are empty), so any stride
        # does; an empty tensor keeps its strides through contiguous(), which may chain nowhere.
        stride_b, stride_s = 1, 1
    elif stride_b is None or stride_s is None:   # batch or slice dims not walkable as one: copy
        copy = True
        strides = tuple(row_major_strides(shape))
        stride_b = merged_stride(shape[:b], strides[:b])
        stride_s = merged_stride(shape[b + k:], strides[b + k:])
    block_t, block_s = tuple_blocks(slice_len, max_block, element_size)
    grid = (cdiv(n_tuples, block_t), max(1, cdiv(slice_len, block_s)) if move else 1)
    index_strides = tuple(strides[b: b + k])
    has_batch = batch > 1
    vec = vec_width(element_size, slice_len, *index_strides,
                    *((stride_b,) if has_batch else ())) if stride_s == 1 and move else 1
    scalars = (*dims8(index_sizes), *dims8(index_strides))
    tail = (n_tuples, n_tuples // batch, slice_len, stride_b, stride_s)
    consts = dict(K=k, SIGNED=idx_dtype in (torch.int64, torch.int32), CHECK=check, MOVE=move,
                  HAS_BATCH=has_batch, UNIT_SLICE=stride_s == 1, VEC=vec,
                  BLOCK_T=block_t, BLOCK_S=block_s)
    key = ("gather", element_size, idx_dtype, fits32(*scalars, *tail), tuple(consts.values()))
    return copy, grid, scalars, tail, consts, key


def gather_nd_triton(out: torch.Tensor, input: torch.Tensor, indices: torch.Tensor, batch_dims: int,
                     check: bool, move: bool = True,
                     max_block: Optional[int] = None) -> Optional[torch.Tensor]:
    """Launch the gather.

    ``input`` is in the natural form ``[*batch, *indexed, *slice]`` with any strides; ``indices``
    is ``[*batch, ..., K]`` (any integer type; int64/int32 are signed and wrap negatives);
    ``out`` has ``n_tuples * slice_len`` elements (any strides).  Returns the violation flag (int64
    tensor holding the first offending flat position in ``indices``, or ``NO_VIOLATION``) when
    ``check``, else ``None``; reading it is the caller's one host sync.  ``max_block`` caps the
    elements per program (tests lower it to exercise many programs and masks).  ``move=False``
    only checks the indices and writes nothing.
    """
    layout = (input.shape, input.stride(), indices.shape, indices.dtype, input.element_size(),
              batch_dims, check, move, max_block)
    plan = _PLANS.get(layout, _PLANS)
    if plan is _PLANS:
        k = indices.shape[-1]
        plan = _plan(tuple(input.shape), tuple(input.stride()), k, indices.numel() // k,
                     batch_dims, input.element_size(), indices.dtype, check, move, max_block)
        if len(_PLANS) >= 1024:
            _PLANS.clear()
        _PLANS[layout] = plan
    flag = torch.full((1,), NO_VIOLATION, dtype=torch.int64, device=input.device) if check else None
    if plan is None:
        return flag
    copy, grid, scalars, tail, consts, key = plan
    src = input.contiguous() if copy else input
    idx = indices.contiguous()
    dst = out if out.is_contiguous() else torch.empty_like(out, memory_format=torch.contiguous_format)
    src_bits, dst_bits = bits_view(src), bits_view(dst)
    if consts["VEC"] > 1 and (src.data_ptr() % 16 or dst.data_ptr() % 16):
        consts = dict(consts, VEC=1)
        key = key + ("unaligned",)
    with launch_guard(input):
        launch(_gather_nd_kernel, grid, key, (dst_bits, src_bits, idx, flag if check else idx),
               (dst_bits, src_bits, idx, *scalars, flag if check else idx, *tail), consts)
    if move and dst is not out:
        out.copy_(dst)
    return flag


# ---------------------------------------------------------------------------------------------
# The op kernels (CUDA dispatch key; the CPU key under backend("triton") with the interpreter)
# ---------------------------------------------------------------------------------------------

def _unwalkable(nat_input: torch.Tensor, lay) -> bool:
    shape, strides, b, k = nat_input.shape, nat_input.stride(), lay.batch_dims, lay.k
    if nat_input.numel() == 0:
        return False
    return (merged_stride(shape[:b], strides[:b]) is None
            or merged_stride(shape[b + k:], strides[b + k:]) is None)


def _compute(input: torch.Tensor, indices: torch.Tensor, lay, check: bool,
             out: Optional[torch.Tensor]) -> torch.Tensor:
    """Into ``out`` (a caller's) or a new tensor.  A fresh output is written in the same pass
    as the index check; a caller's ``out=`` is checked in a separate pre-pass first (it reads
    only the indices), so a failing call leaves it untouched."""
    if lay.k > MAX_K:     # more coordinates than the kernel's arguments (any rank is allowed)
        return gather_nd_torch(input, indices, lay, check, out)
    nat_input = reshaped(input, lay.natural_input_shape)
    if _unwalkable(nat_input, lay):
        # batch or slice dimensions the kernel cannot walk as one strided dimension each (a
        # permuted KV cache): torch's advanced indexing reads them through their strides, where
        # the kernel would need a contiguous copy of the whole input
        return gather_nd_torch(input, indices, lay, check, out)
    nat_indices = reshaped(indices, lay.natural_indices_shape)
    if check:
        refuse_capture("gather_nd", input)
    user_out = out is not None
    if out is None:
        out = torch.empty(lay.out_shape, dtype=input.dtype, device=input.device)
    # a caller's out= with check: a check-only pre-pass, then the gather
    flag = gather_nd_triton(out, nat_input, nat_indices, lay.batch_dims, check,
                            move=not (check and user_out))
    if flag is not None:
        pos = int(flag.item())   # the one host sync of a checked call
        if pos != NO_VIOLATION:
            raise_index_error("gather_nd", indices, pos, indices.shape, lay.index_sizes,
                              lay.dim_names(input.dim()), indices.dtype in SIGNED_INDEX_DTYPES,
                              lay.k)
        if user_out:
            gather_nd_triton(out, nat_input, nat_indices, lay.batch_dims, False)
    return out


def _kernels() -> dict:
    # No Triton kernel for the backward: the portable one (an index_add_) runs on the GPU.
    return dict(make_kernels(_compute), gather_nd_backward=gather_nd_backward)


KERNELS = _kernels()
