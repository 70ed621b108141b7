"""Where a rank's shard lies in the global tensor, computed as DTensor splits (no collective)."""
from __future__ import annotations

from typing import Optional

import torch
from torch.distributed.tensor import Replicate, Shard


def _chunk_bounds(n: int, parts: int, rank: int) -> tuple:
    """DTensor's Shard placement splits like ``torch.chunk``: chunks of ceil(n / parts)."""
    size = -(-n // parts) if parts else n
    start = min(rank * size, n)
    return start, min(start + size, n)


def meta_like(t) -> torch.Tensor:
    """A meta tensor of ``t``'s global shape and dtype: the checks' view of a DTensor call."""
    return torch.empty(t.shape, dtype=t.dtype, device="meta")


def plain(placements) -> bool:
    """Only Replicate and plain Shard (no Partial, no strided shard as FSDP + TP make)."""
    return all(isinstance(p, Replicate) or type(p) is Shard for p in placements)


def local_bounds(shape, mesh, placements) -> Optional[list]:
    """``[(start, stop)]`` per tensor dim: this rank's shard of a tensor of global ``shape``.
    A dim sharded by several mesh dims is split in mesh-dim order, each split chunking the
    previous one (DTensor's order).  None unless the placements are ``plain``."""
    if not plain(placements):
        return None
    bounds = [(0, int(n)) for n in shape]
    for m, p in enumerate(placements):
        if isinstance(p, Shard):
            a, b = bounds[p.dim]
            s, e = _chunk_bounds(b - a, mesh.size(m), mesh.get_local_rank(m))
            bounds[p.dim] = (a + s, a + e)
    return bounds


def shard_stages(n: int, mesh, placements, dim: int) -> list:
    """The mesh dims that shard tensor dim ``dim`` (of global size ``n``), innermost first, each
    as ``(mesh_dim, sizes)``: the sizes of the chunks its ranks hold of the chunk this rank's
    outer mesh dims selected (a merge over that mesh dim gathers those chunks, in order)."""
    stages, length = [], int(n)
    for m, p in enumerate(placements):
        if isinstance(p, Shard) and p.dim == dim:
            parts = mesh.size(m)
            sizes = [b - a for a, b in (_chunk_bounds(length, parts, r) for r in range(parts))]
            stages.append((m, sizes))
            length = sizes[mesh.get_local_rank(m)]
    return stages[::-1]
