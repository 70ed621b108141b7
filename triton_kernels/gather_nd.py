"""GatherND as one Triton kernel: a program moves BLOCK_T whole slices (or BLOCK_S-wide pieces of them)."""
from __future__ import annotations

import math
from typing import Optional

import torch
import triton
import triton.language as tl

from ._common import (NO_VIOLATION, NO_VIOLATION_K, bits_view, launch_guard, merged_stride,
                      refuse_capture, tuple_blocks, tuple_offsets)


@triton.jit
def _gather_nd_kernel(
    out_ptr, in_ptr, idx_ptr, sizes, strides, flag_ptr,
    n_tuples, per_batch, slice_len, stride_in_batch, stride_in_slice,
    K: tl.constexpr, SIGNED: tl.constexpr, CHECK: tl.constexpr, MOVE: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_S: tl.constexpr,
):
    """One program: tuples [pid_t*BLOCK_T, +BLOCK_T) x slice elements [pid_s*BLOCK_S, +BLOCK_S).

    Grid: (cdiv(n_tuples, BLOCK_T), cdiv(slice_len, BLOCK_S)).  ``sizes``/``strides``: the K
    indexed dimension sizes and their element strides, as tuples of scalar arguments.  A tuple with a coordinate out of range
    reads nothing and writes zeros; with CHECK the smallest flat position of such a coordinate is
    recorded in ``flag_ptr`` (a relaxed atomic min: the host reads it after the kernel), which the launcher's caller turns into an IndexError.
    MOVE=False only checks (a pre-pass that keeps a caller's ``out=`` untouched on failure).
    """
    pid_t = tl.program_id(0)
    pid_s = tl.program_id(1)
    offs_t = pid_t.to(tl.int64) * BLOCK_T + tl.arange(0, BLOCK_T)          # [BLOCK_T]
    mask_t = offs_t < n_tuples
    off, ok, first_bad = tuple_offsets(idx_ptr, sizes, strides, offs_t, mask_t, K, SIGNED)
    src = (offs_t // per_batch) * stride_in_batch + off                     # [BLOCK_T] int64
    if CHECK:
        b_first = tl.min(first_bad, axis=0)
        tl.atomic_min(flag_ptr, b_first, mask=(pid_s == 0) & (b_first < NO_VIOLATION_K),
                      sem="relaxed")
    if MOVE:
        offs_s = pid_s.to(tl.int64) * BLOCK_S + tl.arange(0, BLOCK_S)        # [BLOCK_S]
        mask_s = offs_s < slice_len
        b_vals = tl.load(in_ptr + src[:, None] + offs_s[None, :] * stride_in_slice,
                         mask=ok[:, None] & mask_s[None, :], other=0)       # [BLOCK_T, BLOCK_S]
        tl.store(out_ptr + offs_t[:, None] * slice_len + offs_s[None, :], b_vals,
                 mask=mask_t[:, None] & mask_s[None, :])


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
    k = indices.shape[-1]
    b = batch_dims
    shape = list(input.shape)
    index_sizes = shape[b: b + k]
    batch = math.prod(shape[:b])
    slice_len = math.prod(shape[b + k:])
    n_tuples = indices.numel() // k
    device = input.device
    flag = torch.full((1,), NO_VIOLATION, dtype=torch.int64, device=device) if check else None
    if n_tuples == 0 or ((slice_len == 0 or not move) and not check):
        return flag
    src = input
    strides = list(src.stride())
    stride_b = merged_stride(shape[:b], strides[:b])
    stride_s = merged_stride(shape[b + k:], strides[b + k:])
    if src.numel() == 0:
        # Nothing is read (every tuple is out of range, or the slices are empty), so any stride
        # does; an empty tensor keeps its strides through contiguous(), which may chain nowhere.
        stride_b, stride_s = 1, 1
    elif stride_b is None or stride_s is None:   # batch or slice dims not walkable as one: copy
        src = input.contiguous()
        strides = list(src.stride())
        stride_b = merged_stride(shape[:b], strides[:b])
        stride_s = merged_stride(shape[b + k:], strides[b + k:])
    idx = indices.contiguous()
    dst = out if out.is_contiguous() else torch.empty_like(out, memory_format=torch.contiguous_format)
    block_t, block_s = tuple_blocks(n_tuples, slice_len, max_block)
    grid = (triton.cdiv(n_tuples, block_t), max(1, triton.cdiv(slice_len, block_s)) if move else 1)
    with launch_guard(input):
        _gather_nd_kernel[grid](
            bits_view(dst), bits_view(src), idx, tuple(index_sizes), tuple(strides[b: b + k]),
            flag if check else idx,
            n_tuples, n_tuples // batch, slice_len, stride_b, stride_s,
            K=k, SIGNED=idx.dtype in (torch.int64, torch.int32), CHECK=check, MOVE=move,
            BLOCK_T=block_t, BLOCK_S=block_s,
        )
    if move and dst is not out:
        out.copy_(dst)
    return flag


# ---------------------------------------------------------------------------------------------
# The op kernels (CUDA dispatch key; the CPU key under backend("triton") with the interpreter)
# ---------------------------------------------------------------------------------------------

def _compute(input: torch.Tensor, indices: torch.Tensor, lay, check: bool,
             out: Optional[torch.Tensor]) -> torch.Tensor:
    """Into ``out`` (a caller's) or a new tensor.  A fresh output is written in the same pass
    as the index check; a caller's ``out=`` is checked in a separate pre-pass first (it reads
    only the indices), so a failing call leaves it untouched."""
    from .._checks import raise_index_error
    from .._tables import NO_ERROR, SIGNED_INDEX_DTYPES
    nat_input = input.reshape(lay.natural_input_shape)
    nat_indices = indices.reshape(lay.natural_indices_shape)
    user_out = out is not None
    if out is None:
        out = torch.empty(lay.out_shape, dtype=input.dtype, device=input.device)

    def run(check_now: bool, move: bool) -> None:
        flag = gather_nd_triton(out, nat_input, nat_indices, lay.batch_dims, check_now, move)
        if flag is not None:
            pos = int(flag.item())   # the one host sync of a checked call
            if pos != NO_ERROR:
                raise_index_error("gather_nd", indices, pos, indices.shape, lay.index_sizes,
                                  lay.dim_names(input.dim()),
                                  indices.dtype in SIGNED_INDEX_DTYPES, lay.k)

    if check:
        refuse_capture("gather_nd", input)
    if check and user_out:
        run(True, False)
        run(False, True)
    else:
        run(check, True)
    return out


def _kernels() -> dict:
    from ..portable.gather_nd import gather_nd_backward, make_kernels
    # No Triton kernel for the backward: the portable one (an index_add_) runs on the GPU.
    return dict(make_kernels(_compute), gather_nd_backward=gather_nd_backward)


KERNELS = _kernels()
