"""scatter_nd on a DTensor whose input is sharded on an indexed dimension (indices and updates
replicated): each rank applies, in index order, only the tuples that land in its shard, after
subtracting the shard's offset.  The duplicate policy (the last tuple wins) and every reduction
hold exactly as on one device, since each element's tuples reach its rank in their order.  No
collective."""
from __future__ import annotations

from typing import Optional

import torch
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard

from ._topk import _chunk_bounds


def _replicated(t) -> bool:
    return not isinstance(t, DTensor) or all(isinstance(p, Replicate) for p in t.placements)


def sharded_index_dim(input, indices, updates, input_dimension_count, indices_dimension_count):
    """``(mesh dim, tensor dim)`` when the call takes this path, else None."""
    if not isinstance(input, DTensor) or input_dimension_count is not None \
            or indices_dimension_count is not None or indices.ndim == 0:
        return None
    k = indices.shape[-1]
    sharded = [(m, p.dim) for m, p in enumerate(input.placements)
               if isinstance(p, Shard) and p.dim < k]
    if len(sharded) != 1 or not _replicated(indices) or not _replicated(updates):
        return None
    if any(not isinstance(p, Replicate) for m, p in enumerate(input.placements)
           if m != sharded[0][0]):
        return None                      # a second sharded mesh dim: the general rules
    return sharded[0]


def _local(t, grad_placements=None):
    if isinstance(t, DTensor):
        return t.to_local(grad_placements=grad_placements)
    return t


def _select(input: DTensor, indices, updates, op: str, mesh_dim: int, dim: int):
    """This rank's tuples (re-offset) and their updates."""
    n = input.shape[dim]
    mesh = input.device_mesh
    start, stop = _chunk_bounds(n, mesh.size(mesh_dim), mesh.get_local_rank(mesh_dim))
    idx = _local(indices)
    # updates are replicated: each rank's gradient is its share of the sum.
    upd = _local(updates, grad_placements=[Partial()] * mesh.ndim
                 if isinstance(updates, DTensor) else None)
    k = idx.shape[-1]
    flat = idx.reshape(-1, k)
    if flat.dtype == torch.uint64:
        wide = flat.view(torch.int64)
        if bool((wide < 0).any()):          # 2**63 or more: out of range, never negative
            pos = int((wide < 0).any(1).nonzero()[0, 0])
            raise IndexError(f"{op}: IndicesTensor tuple {pos} holds a uint64 index of 2**63 or "
                             f"more, out of range")
        flat = wide
    else:
        flat = flat.to(torch.int64)
    col = flat[:, dim]
    signed = indices.dtype in (torch.int64, torch.int32)
    low = -n if signed else 0
    bad = (col < low) | (col >= n)
    if bool(bad.any()):
        pos = int(bad.nonzero()[0, 0])
        raise IndexError(f"{op}: IndicesTensor tuple {pos} has index {int(col[pos])} in "
                         f"dimension {dim}, out of range for InputTensor.Sizes[{dim}] = {n}")
    col = torch.where(col < 0, col + n, col)
    mine = (col >= start) & (col < stop)
    local_idx = flat[mine].clone()
    local_idx[:, dim] = col[mine] - start
    local_upd = upd.reshape((-1,) + tuple(input.shape[k:]))[mine]
    return local_idx, local_upd


def scatter_nd(input: DTensor, indices, updates, reduction: str, mesh_dim: int, dim: int,
               check_indices: bool = True) -> DTensor:
    from ..scatter_nd import scatter_nd as _scatter_nd
    local_idx, local_upd = _select(input, indices, updates, "scatter_nd", mesh_dim, dim)
    out = _scatter_nd(input.to_local(), local_idx, local_upd, reduction,
                      check_indices=check_indices)
    return DTensor.from_local(out, input.device_mesh, input.placements, run_check=False,
                              shape=input.shape, stride=input.stride())


def scatter_nd_(input: DTensor, indices, updates, reduction: str, mesh_dim: int, dim: int,
                check_indices: bool = True) -> DTensor:
    from ..scatter_nd import scatter_nd_ as _scatter_nd_
    local_idx, local_upd = _select(input, indices, updates, "scatter_nd_", mesh_dim, dim)
    _scatter_nd_(input._local_tensor, local_idx, local_upd, reduction,
                 check_indices=check_indices)
    return input


def route(input, indices, updates, reduction, input_dimension_count, indices_dimension_count,
          check_indices, inplace: bool) -> Optional[DTensor]:
    where = sharded_index_dim(input, indices, updates, input_dimension_count,
                              indices_dimension_count)
    if where is None:
        return None
    fn = scatter_nd_ if inplace else scatter_nd
    return fn(input, indices, updates, reduction, *where, check_indices=check_indices)
