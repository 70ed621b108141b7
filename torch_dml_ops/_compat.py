"""The one place that knows torch versions apart (torch 2.10 through 2.14 are supported).

Feature probes, not version strings, where a feature can be probed.  Everything else in the
package uses APIs common to every supported torch.
"""
from __future__ import annotations

import torch

#: torch 2.10's AOTInductor hands a ScalarType argument of a custom op to the kernel as
#: torch.export's serialized enum value, not c10's (pytorch/pytorch#169157, fixed by #173562):
#: top_k1's index_dtype int64 arrives as float16, int32 as int64.  Not probeable without
#: compiling a package, hence a version: below 2.13, the first release tested without it.
AOTI_MISREADS_DTYPE_ARGS = torch.__version__ < "2.13"

#: Whether a DTensor leaf's gradient keeps the leaf's shards: from torch 2.13 on.  torch 2.10
#: replicates it where it passes DTensor's scatter strategy (the backward of top_k1 through its
#: sharding rule) or new_empty_strided (autograd's copy of a gradient whose strides differ from
#: the leaf's: uneven shards, as under the distributed top-k).  The values are the same.  Read
#: by the tests only.
DTENSOR_GRAD_KEEPS_SHARDS = torch.__version__ >= "2.13"


def exporting() -> bool:
    """Whether torch.export is tracing.  Not ``torch.compiler.is_exporting()`` below 2.13:
    torch 2.10's dynamo makes it True under every trace, torch.compile's included (where the
    shape checks it would enable specialize shapes); the flag behind it is set by export only."""
    flag = getattr(torch.compiler, "_is_exporting_flag", None)
    return torch.compiler.is_exporting() if flag is None else bool(flag)


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
    from torch.distributed.tensor._op_schema import OpSchema
    try:
        OpSchema(torch.ops.torch_dml_ops.scatter_nd_.default, (), {}).return_type_tensor()
        return
    except IndexError:
        pass
    unpatched = OpSchema.return_type_tensor

    def return_type_tensor(self) -> bool:
        return len(self.op._schema.returns) > 0 and unpatched(self)
    OpSchema.return_type_tensor = return_type_tensor  # type: ignore[method-assign]  # torch patch


def export_serializes_uint32() -> bool:
    """Whether torch.export can save a program holding uint32 (torch 2.10's serializer has no
    uint16/uint32/uint64: such a program cannot be saved nor compiled by AOTInductor)."""
    from torch._export.serde import serialize
    table = getattr(serialize, "_TORCH_TO_SERIALIZE_DTYPE", None)
    return table is None or torch.uint32 in table      # no table to read: assume it can


def inplace_placement_refused(exc: BaseException) -> bool:
    """Whether ``exc`` is DTensor's refusal of an in-place op whose target would have to change
    placement: from torch 2.13 its own message; torch 2.10 fails the same call in sharding
    propagation with "min() arg is an empty sequence" (every strategy filtered out by the
    in-place rule: for ``scatter_nd_``, whose rules always offer all-Replicate, nothing else
    empties them)."""
    text = str(exc)
    return ("in-place operations that require placement changes" in text
            or ("Sharding propagation failed" in text and "scatter_nd_" in text
                and "min() arg is an empty sequence" in text))


def function_applier(function: "type[torch.autograd.Function]", n_tensors: int):
    """``function.apply`` (a ``torch.autograd.Function`` whose ``forward`` takes ``*args``, the
    first ``n_tensors`` of them tensors, the rest not) without torch's Python wrapper, for a
    call outside every torch.func transform (the caller's condition).  ``Function.apply`` binds
    the arguments to ``forward``'s signature with ``inspect.signature`` on every call (~20 us of
    a ~40 us small call; a no-op for a ``*args`` forward), unwraps torch.func wrappers whose
    transform has exited, and hands the call to ``_C._FunctionBase.apply``, which runs forward
    and setup_context and records the node.  This does the last two only.  Probed: where torch
    lacks either piece it is ``function.apply`` itself."""
    base = getattr(torch._C, "_FunctionBase", None)
    unwrap = getattr(getattr(torch._C, "_functorch", None), "unwrap_if_dead", None)
    try:
        apply = base.__dict__["apply"].__get__(None, function)
    except (AttributeError, KeyError, TypeError):
        apply = None
    if apply is None or unwrap is None:
        return function.apply

    def run(*args):
        return apply(*[unwrap(t) for t in args[:n_tensors]], *args[n_tensors:])
    return run
