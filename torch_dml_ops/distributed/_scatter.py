"""scatter_nd on a DTensor whose input is sharded on an indexed dimension (by one or more mesh
dims; indices replicated): each rank applies, in index order, only the tuples that land in its
shard, after subtracting the shard's offset.  The duplicate policy (the last tuple wins) and
every reduction hold exactly as on one device, since each element's tuples reach its rank in
their order.  No collective.

Other mesh dims may shard a trailing (slice) dim of the input, with ``updates`` sharded alike on
its matching dim or replicated (then each rank slices its part); anything else (Partial,
strided shards, sharded indices) is left to the sharding rules, which redistribute.
"""
from __future__ import annotations

from typing import Optional, cast

import torch
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard

from .._checks import check_scatter_nd
from .._levels import _state
from .._tables import SIGNED_INDEX_DTYPES
from ..portable._common import check_and_wrap_plan, in_range, index_matrix
from ..scatter_nd import scatter_nd as _scatter_nd, scatter_nd_ as _scatter_nd_
from ._placements import local_bounds, meta_like, plain


def _replicated(t) -> bool:
    return not isinstance(t, DTensor) or all(isinstance(p, Replicate) for p in t.placements)


def applies(input, indices, updates, input_dimension_count, indices_dimension_count) -> bool:
    """Whether the call takes this path."""
    if not isinstance(input, DTensor) or input_dimension_count is not None \
            or indices_dimension_count is not None or indices.ndim == 0:
        return False
    k, placements = indices.shape[-1], input.placements
    if not any(isinstance(p, Shard) and p.dim < k for p in placements):
        return False                    # the sharding rules cover it (no collective)
    if not plain(placements) or not _replicated(indices):
        return False
    if isinstance(indices, DTensor) and indices.device_mesh != input.device_mesh:
        return False
    if isinstance(updates, DTensor):
        if updates.device_mesh != input.device_mesh:
            return False
        tuple_dims = indices.ndim - 1
        for p_in, p_up in zip(placements, updates.placements):
            if isinstance(p_up, Replicate):
                continue
            if not (type(p_up) is Shard and isinstance(p_in, Shard) and p_in.dim >= k
                    and p_up.dim == tuple_dims + p_in.dim - k):
                return False
    return True


def _local_call(input: DTensor, indices, updates, reduction, check_indices, op):
    """This rank's (input shard, tuples, updates), or None when the updates' shard does not
    cover the input's (nested shards split in another order: the rules then redistribute)."""
    mesh, placements = input.device_mesh, input.placements
    # Every rule of the op, with its messages, on the global shapes.
    lay = check_scatter_nd(meta_like(input), meta_like(indices), meta_like(updates), reduction,
                           None, None, _state.level, check_indices, False, op)
    k = lay.k
    tuple_dims = indices.ndim - 1
    # Plain placements here (the caller's test), so bounds, not None.
    bounds = cast(list, local_bounds(input.shape, mesh, placements))
    # The updates this rank needs: its input shard's part of every trailing dim.
    up_pl = updates.placements if isinstance(updates, DTensor) else [Replicate()] * mesh.ndim
    up_bounds = (cast(list, local_bounds(updates.shape, mesh, up_pl))
                 if isinstance(updates, DTensor)
                 else [(0, int(n)) for n in updates.shape])
    cuts = []
    for j in range(k, input.ndim):
        (a, b), (ua, ub) = bounds[j], up_bounds[tuple_dims + j - k]
        if a < ua or b > ub:
            return None
        cuts.append((tuple_dims + j - k, a - ua, b - a))
    if isinstance(updates, DTensor):
        # A rank that uses part of replicated updates owns a part of their gradient: Partial.
        grad_pl = [Partial() if isinstance(p_in, Shard) and isinstance(p_up, Replicate) else p_up
                   for p_in, p_up in zip(placements, up_pl)]
        upd = updates.to_local(grad_placements=grad_pl)
    else:
        upd = updates
    for d, start, length in cuts:
        if start or length != upd.shape[d]:
            upd = upd.narrow(d, start, length)
    idx = indices.to_local() if isinstance(indices, DTensor) else indices
    idx2 = index_matrix(idx, lay.n_tuples, k, small=False)
    signed = idx.dtype in SIGNED_INDEX_DTYPES
    flat = idx2.to(torch.int64)
    if check_indices:
        # The single-device range check and message (negative indices wrap; the local call
        # checks its re-offset tuples again).
        check_and_wrap_plan(op, idx, idx2, lay.index_sizes, signed, lay.dim_names(input.ndim))
        mine = torch.ones(flat.shape[0], dtype=torch.bool, device=flat.device)
    else:   # out-of-range tuples are skipped, as on one device
        mine = in_range(idx2, lay.index_sizes, signed)
    local = flat.clone()
    for j in range(k):
        a, b = bounds[j]
        n = int(input.shape[j])
        if (a, b) == (0, n):
            continue
        col = torch.where(flat[:, j] < 0, flat[:, j] + n, flat[:, j])
        mine &= (col >= a) & (col < b)
        local[:, j] = col - a
    upd = upd.reshape((-1,) + tuple(upd.shape[tuple_dims:]))
    return local[mine], upd[mine]


def route(input, indices, updates, reduction, input_dimension_count, indices_dimension_count,
          check_indices, inplace: bool) -> Optional[DTensor]:
    """The sharded-indexed-dim scatter, or None when the call does not take this path."""
    if not applies(input, indices, updates, input_dimension_count, indices_dimension_count):
        return None
    op = "scatter_nd_" if inplace else "scatter_nd"
    picked = _local_call(input, indices, updates, reduction, check_indices, op)
    if picked is None:
        return None
    local_idx, local_upd = picked
    differentiable = torch.is_grad_enabled() and (input.requires_grad or local_upd.requires_grad)
    if inplace and not differentiable:
        # Into the shard itself; the DTensor's version counter records the write.
        _scatter_nd_(input._local_tensor, local_idx, local_upd, reduction,
                     check_indices=check_indices)
        torch.autograd.graph.increment_version(input)
        return input
    local = input.to_local()
    if inplace:
        # to_local aliases the shard that copy_ then overwrites, and the scatter's backward may
        # have saved it ("mul", "max", "min").
        local = local.clone()
    out = DTensor.from_local(_scatter_nd(local, local_idx, local_upd, reduction,
                                         check_indices=check_indices),
                             input.device_mesh, input.placements, run_check=False,
                             shape=input.shape, stride=input.stride())
    if inplace:
        # Under autograd: a write autograd records on the DTensor (torch's in-place rules and
        # gradients; a leaf that requires grad is refused), a local copy (same placements).
        return input.copy_(out)
    return out
