"""Exact stable top-k along a sharded axis: one all-gather of k candidates per rank.

Each rank takes the stable top-k of its shard (at most k candidates), turns the local indices
into global ones, and all-gathers values and indices packed into one byte buffer (any dtype
crosses gloo or NCCL unchanged).  Every rank then drops the padding, concatenates the candidates
in rank order and takes the stable top-k of that.  Candidates of rank r precede those of rank
r+1 and carry larger global indices in order, so among equal values the merge keeps the lower
global index first: the result equals ``top_k1`` of the whole tensor, ties, NaN and +-0 included.

An axis sharded by several mesh dims (nested chunks) merges once per mesh dim, innermost first:
each merge yields the top-k of the chunk one level up, in the same order.
"""
from __future__ import annotations

from typing import Any, Dict, Union, cast

import torch
from torch.distributed.tensor import DTensor, Replicate, Shard

from .._checks import check_top_k1
from .._compat import all_gather_single
from .._levels import _state
from .._types import Direction
from ..top_k1 import TOP_K1, AxisDirection, TopK1Result, _direction
from ..top_k1 import top_k1 as _top_k1
from ._placements import local_bounds, meta_like, plain, shard_stages


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


def _stable_top(x: torch.Tensor, have: int, direction):
    """``top_k1`` of the last dim with ``have`` (<= its size) kept; ``have`` 0 (an empty
    shard, or an inner merge of empty chunks) gives empty values and positions."""
    if have:
        return _top_k1(x, have, -1, direction)
    return x[..., :0], torch.empty(x.shape[:-1] + (0,), dtype=torch.int64, device=x.device)


def _on_axis(placements, axis: int) -> bool:
    return any(isinstance(p, Shard) and p.dim == axis for p in placements)


class _ShardedTopK(torch.autograd.Function):
    @staticmethod
    def forward(ctx, local, k, axis, direction, start, stop, stages):
        """``local`` holds ``[start, stop)`` of the axis; ``stages``: ``(group, sizes)`` per
        mesh dim that shards the axis, innermost first (``_placements.shard_stages``)."""
        have = min(k, stop - start)
        v, i = _stable_top(local.movedim(axis, -1).detach(), have, direction)
        i = i + start
        for group, sizes in stages:
            pad = k - have
            if pad:
                v = torch.cat([v, v.new_zeros(v.shape[:-1] + (pad,))], dim=-1)
                i = torch.cat([i, i.new_zeros(i.shape[:-1] + (pad,))], dim=-1)
            gathered = all_gather_single(_pack(v, i).unsqueeze(0), gather_dim=0, group=group)
            cand_v, cand_i = [], []
            for r, size in enumerate(sizes):
                real = min(k, size)
                rv, ri = _unpack(gathered[r], k, local.dtype)
                cand_v.append(rv[..., :real])
                cand_i.append(ri[..., :real])
            cv, ci = torch.cat(cand_v, dim=-1), torch.cat(cand_i, dim=-1)
            have = min(k, cv.shape[-1])
            v, mi = _stable_top(cv, have, direction)
            i = torch.gather(ci, -1, mi)
        ctx.save_for_backward(i)
        ctx.meta = (axis, start, stop, local.shape)
        ctx.mark_non_differentiable(i)
        return v.movedim(-1, axis), i.movedim(-1, axis)

    @staticmethod
    def backward(ctx, grad_values, _grad_indices):
        (global_idx,) = ctx.saved_tensors
        axis, start, stop, shape = ctx.meta
        g = grad_values.movedim(axis, -1)
        mine = (global_idx >= start) & (global_idx < stop)
        local_idx = torch.where(mine, global_idx - start, 0)
        grad = g.new_zeros(tuple(shape[:axis]) + tuple(shape[axis + 1:]) + (shape[axis],))
        grad.scatter_add_(-1, local_idx, torch.where(mine, g, 0))
        return grad.movedim(-1, axis), None, None, None, None, None, None


def top_k1(input: DTensor, k: int, axis: int = -1,
           direction: Union[Direction, AxisDirection] = "decreasing",
           index_dtype: torch.dtype = torch.int64) -> TopK1Result:
    """``torch_dml_ops.top_k1`` of a DTensor.  Sharded along ``axis`` (by one or more mesh
    dims): the exact distributed top-k (one all-gather of k candidates per rank and mesh dim);
    the result is replicated along those mesh dims and keeps the other placements.  Otherwise
    the op runs on the local shards (its sharding rule).  Partial placements are reduced first
    (a top-k of partial sums is not the top-k of the sum)."""
    if not isinstance(input, DTensor):
        raise TypeError(f"torch_dml_ops.distributed.top_k1: input must be a DTensor, got "
                        f"{type(input).__name__}")
    d = _direction(direction)
    level = _state.level
    # Every rule of the op, with its messages, on the global shape.
    ax = check_top_k1(meta_like(input), k, axis, d, index_dtype, level)
    if not _on_axis(input.placements, ax):
        return TopK1Result(*TOP_K1.call_public(input, k, axis, d, index_dtype, level))
    mesh = input.device_mesh
    if not plain(input.placements):
        # Partial sums, or a strided shard (whose chunk order is not the axis order): replicate
        # those mesh dims first.
        input = input.redistribute(mesh, [p if plain([p]) else Replicate()
                                          for p in input.placements])
        if not _on_axis(input.placements, ax):
            return TopK1Result(*TOP_K1.call_public(input, k, axis, d, index_dtype, level))
    start, stop = cast(list, local_bounds(input.shape, mesh, input.placements))[ax]  # plain
    stages = [(mesh.get_group(m), sizes)
              for m, sizes in shard_stages(input.shape[ax], mesh, input.placements, ax)]
    values, indices = _ShardedTopK.apply(input.to_local(), k, ax, d, start, stop, stages)
    if index_dtype != torch.int64:
        indices = indices.to(index_dtype)
    placements = [Replicate() if _on_axis([p], ax) else p for p in input.placements]
    shape = list(input.shape)
    shape[ax] = k
    wrap: Dict[str, Any] = dict(device_mesh=mesh, placements=placements, run_check=False)
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
