"""The one place that knows torch versions apart (torch 2.10 through 2.14 are supported).

Feature probes, not version strings, where a feature can be probed.  Everything else in the
package uses APIs common to every supported torch.
"""
from __future__ import annotations


def all_gather_single(tensor, gather_dim: int, group):
    """``funcol.all_gather_single`` (torch 2.13 on); before, the same collective is
    ``all_gather_tensor``, which torch 2.14 deprecates (it warns on each call)."""
    from torch.distributed import _functional_collectives as funcol
    fn = getattr(funcol, "all_gather_single", None) or funcol.all_gather_tensor
    return fn(tensor, gather_dim=gather_dim, group=group)


def dtensor_op_handlers():
    """DTensor's table of per-op handlers that replace its sharding propagation
    (``DTensor._op_dispatcher._custom_op_handlers``, private, in every supported torch), or
    None if a torch lacks it."""
    from torch.distributed.tensor import DTensor
    handlers = getattr(getattr(DTensor, "_op_dispatcher", None), "_custom_op_handlers", None)
    return handlers if isinstance(handlers, dict) else None


def fix_dtensor_ops_without_returns() -> None:
    """torch 2.10's DTensor fails sharding propagation of every op that returns nothing (an
    in-place op ``-> ()`` such as ``scatter_nd_``): ``OpSchema.return_type_tensor`` indexes the
    first return.  torch 2.13 checks for none first; this gives older releases the same check.
    Probed on such an op, so a torch that has the check is left untouched."""
    import torch
    from torch.distributed.tensor._op_schema import OpSchema
    try:
        OpSchema(torch.ops.torch_dml_ops.scatter_nd_.default, (), {}).return_type_tensor()
        return
    except IndexError:
        pass
    unpatched = OpSchema.return_type_tensor

    def return_type_tensor(self) -> bool:
        return len(self.op._schema.returns) > 0 and unpatched(self)
    OpSchema.return_type_tensor = return_type_tensor
