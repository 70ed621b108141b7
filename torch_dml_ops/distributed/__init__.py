"""torch_dml_ops.distributed: the ops on DTensors (torch.distributed.tensor).

Importing it registers sharding rules for ``gather_nd``, ``scatter_nd`` and ``top_k1``
(``_sharding``): the placements under which each runs on the local shards with no collective,
and Replicate otherwise.  ``top_k1`` along a sharded axis is the exact distributed top-k of
:func:`top_k1` (one all-gather of k candidates per rank), which ``torch_dml_ops.top_k1`` uses for
such a DTensor.

All of the package's DTensor handling is here.  The rest of the package reaches it through one
hook, ``torch_dml_ops._subclass``, which the public functions call for an input of a tensor
subclass and which imports this package then (``_fronts``: what they do with a DTensor); ``import
torch_dml_ops`` imports it at once where ``torch.distributed.tensor`` is already imported.  This
package imports the op modules, never the other way round.
"""
from . import _sharding
from ._topk import top_k1

_sharding.register()

__all__ = ["top_k1"]
