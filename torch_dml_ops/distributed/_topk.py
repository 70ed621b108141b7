"""Exact stable top-k along a sharded axis: one all-gather of k candidates per rank.

Each rank takes the stable top-k of its shard (at most k candidates), turns the local indices
into global ones, and all-gathers values and indices packed into one byte buffer (any dtype
crosses gloo or NCCL unchanged).  Every rank then drops the padding, concatenates the candidates
in rank order and takes the stable top-k of that.  Candidates of rank r precede those of rank
r+1 and carry larger global indices in order, so among equal values the merge keeps the lower
global index first: the result equals ``top_k1`` of the whole tensor, ties, NaN and +-0 included.
"""
from __future__ import annotations

import torch
import torch.distributed._functional_collectives as funcol
from torch.distributed.tensor import DTensor, Replicate, Shard

from .._checks import check_top_k1
from .._levels import _state
from ..top_k1 import TOP_K1, TopK1Result, _direction
from ..top_k1 import top_k1 as _top_k1


def _chunk_bounds(n: int, parts: int, rank: int) -> tuple:
    """DTensor's Shard placement splits like ``torch.chunk``: chunks of ceil(n / parts)."""
    size = -(-n // parts) if parts else n
    start = min(rank * size, n)
    return start, min(start + size, n)


def _pack(values: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """``[..., k]`` values and int64 indices as one uint8 buffer ``[..., k * (itemsize + 8)]``."""
    v = values.contiguous().view(torch.uint8).reshape(*values.shape[:-1], -1)
    i = indices.contiguous().view(torch.uint8).reshape(*indices.shape[:-1], -1)
    return torch.cat([v, i], dim=-1)


def _unpack(buf: torch.Tensor, k: int, dtype: torch.dtype) -> tuple:
    itemsize = torch.empty((), dtype=dtype).element_size()
    v = buf[..., :k * itemsize].contiguous().view(dtype)
    i = buf[..., k * itemsize:].contiguous().view(torch.int64)
    return v, i


class _ShardedTopK(torch.autograd.Function):
    @staticmethod
    def forward(ctx, local, k, axis, direction, n, group, parts, rank):
        start, stop = _chunk_bounds(n, parts, rank)
        moved = local.movedim(axis, -1)
        kk = min(k, stop - start)
        if kk > 0:
            v, i = _top_k1(moved.detach(), kk, -1, direction)
        else:
            v = moved.new_empty(moved.shape[:-1] + (0,))
            i = torch.empty(v.shape, dtype=torch.int64, device=v.device)
        pad = k - kk
        if pad:
            v = torch.cat([v, v.new_zeros(v.shape[:-1] + (pad,))], dim=-1)
            i = torch.cat([i, i.new_zeros(i.shape[:-1] + (pad,))], dim=-1)
        buf = _pack(v, i + start)
        gathered = funcol.all_gather_single(buf.unsqueeze(0), gather_dim=0, group=group)
        gathered = funcol.wait_tensor(gathered)
        cand_v, cand_i = [], []
        for r in range(parts):
            r_start, r_stop = _chunk_bounds(n, parts, r)
            real = min(k, r_stop - r_start)
            rv, ri = _unpack(gathered[r], k, local.dtype)
            cand_v.append(rv[..., :real])
            cand_i.append(ri[..., :real])
        cv, ci = torch.cat(cand_v, dim=-1), torch.cat(cand_i, dim=-1)
        mv, mi = _top_k1(cv, k, -1, direction)
        global_idx = torch.gather(ci, -1, mi)
        ctx.save_for_backward(global_idx)
        ctx.meta = (axis, start, stop, local.shape)
        ctx.mark_non_differentiable(global_idx)
        return mv.movedim(-1, axis), global_idx.movedim(-1, axis)

    @staticmethod
    def backward(ctx, grad_values, _grad_indices):
        (global_idx,) = ctx.saved_tensors
        axis, start, stop, shape = ctx.meta
        g = grad_values.movedim(axis, -1)
        mine = (global_idx >= start) & (global_idx < stop)
        local_idx = torch.where(mine, global_idx - start, 0)
        grad = g.new_zeros(tuple(shape[:axis]) + tuple(shape[axis + 1:]) + (shape[axis],))
        grad.scatter_add_(-1, local_idx, torch.where(mine, g, 0))
        return grad.movedim(-1, axis), None, None, None, None, None, None, None


def sharded_axis(input: DTensor, axis: int):
    """The mesh dimension that shards ``axis`` (None if none does; ValueError if several)."""
    dims = [m for m, p in enumerate(input.placements) if isinstance(p, Shard) and p.dim == axis]
    if len(dims) > 1:
        raise ValueError(f"top_k1: axis {axis} is sharded on mesh dimensions {dims}; sharding "
                         f"an axis on more than one mesh dimension is not supported")
    return dims[0] if dims else None


def top_k1(input: DTensor, k: int, axis: int = -1, direction="decreasing",
           index_dtype: torch.dtype = torch.int64) -> TopK1Result:
    """``torch_dml_ops.top_k1`` of a DTensor.  Sharded along ``axis``: the exact distributed
    top-k (one all-gather of k candidates per rank); the result is replicated along that mesh
    dimension.  Otherwise the op runs on the local shards (its sharding rule)."""
    if not isinstance(input, DTensor):
        raise TypeError(f"torch_dml_ops.distributed.top_k1: input must be a DTensor, got "
                        f"{type(input).__name__}")
    d = _direction(direction)
    level = _state.level
    # Every rule of the op, with its messages, on the global shape.
    ax = check_top_k1(torch.empty(input.shape, dtype=input.dtype, device="meta"), k, axis, d,
                      index_dtype, level)
    m = sharded_axis(input, ax)
    if m is None:
        return TopK1Result(*TOP_K1.call_public(input, k, axis, d, index_dtype, level))
    n = input.shape[ax]
    mesh = input.device_mesh
    values, indices = _ShardedTopK.apply(input.to_local(), k, ax, d, n, mesh.get_group(m),
                                         mesh.size(m), mesh.get_local_rank(m))
    if index_dtype != torch.int64:
        indices = indices.to(index_dtype)
    placements = list(input.placements)
    placements[m] = Replicate()
    shape = list(input.shape)
    shape[ax] = k
    wrap = dict(device_mesh=mesh, placements=placements, run_check=False)
    return TopK1Result(DTensor.from_local(values, shape=torch.Size(shape),
                                          stride=_contiguous_strides(shape), **wrap),
                       DTensor.from_local(indices, shape=torch.Size(shape),
                                          stride=_contiguous_strides(shape), **wrap))


def _contiguous_strides(shape):
    strides, s = [], 1
    for n in reversed(shape):
        strides.append(s)
        s *= n
    return tuple(reversed(strides))
