"""torch_dml_ops.distributed: the ops on DTensors (torch.distributed.tensor).

Importing ``torch_dml_ops`` registers sharding rules for ``gather_nd``, ``scatter_nd`` and
``top_k1`` (``_sharding``): the placements under which each runs on the local shards with no
collective, and Replicate otherwise.  ``top_k1`` along a sharded axis is the exact distributed
top-k of :func:`top_k1` (one all-gather of k candidates per rank), which ``torch_dml_ops.top_k1``
uses for such a DTensor.
"""
from . import _sharding
from ._topk import top_k1

_sharding.register()

__all__ = ["top_k1"]
