"""What the public functions do with a DTensor, beyond the op's own path under its sharding
rules.  Reached only through ``torch_dml_ops._subclass`` (the public functions call it for an
input of a tensor subclass):

* ``gather_nd(out=)``, ``scatter_nd(out=)``: ``into_dtensor_out`` (any ``out`` placement);
* ``scatter_nd`` / ``scatter_nd_`` on an input sharded on an indexed dim: ``_scatter.route``;
* ``top_k1`` along a sharded axis: the distributed top-k (``_topk.top_k1``);
* ``scatter_nd_`` refused by DTensor (a target that would change placement): ``refusal``, the
  error in the op's terms.

Every other DTensor call returns None from ``route`` and runs the op's own path.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional

import torch
from torch.distributed.tensor import DTensor, Shard

from .._checks import check_out_meta
from .._compat import inplace_placement_refused
from ..gather_nd import GATHER_ND_OUT, gather_nd
from ..scatter_nd import SCATTER_ND_OUT, scatter_nd
from . import _scatter
from ._topk import top_k1


def into_dtensor_out(overload, out, tensors, compute):
    """``out=`` on DTensors (``overload``: the ``_autograd.OutOverload``): ``compute()`` (the
    functional op, which runs under its sharding rules) and then ``out.copy_(result)``, which
    moves the result to ``out``'s placements if they differ.  So every ``out`` placement works
    (the ``out=`` overloads' rules take only the output's placements), the op runs sharded
    rather than on inputs redistributed to suit ``out``, and a call that fails writes nothing.
    The cost: one output-sized temporary."""
    op = overload.public_name
    if not isinstance(out, DTensor):
        raise RuntimeError(f"{op}: out= is a {type(out).__name__} while the inputs are DTensors; "
                           f"pass a DTensor out= (on the inputs' device mesh)")
    overload.refuse_grad(tuple(t for t in tensors + (out,) if isinstance(t, torch.Tensor)))
    result = compute()
    check_out_meta(op, out, result.shape, result.dtype)
    out.copy_(result)
    return out


def _gather_nd(input, indices, batch_dims, input_dimension_count, indices_dimension_count,
               check_indices, out):
    if out is None:
        return None
    return into_dtensor_out(GATHER_ND_OUT, out, (input, indices), lambda: gather_nd(
        input, indices, batch_dims, input_dimension_count=input_dimension_count,
        indices_dimension_count=indices_dimension_count, check_indices=check_indices))


def _scatter_nd(input, indices, updates, reduction, input_dimension_count,
                indices_dimension_count, check_indices, out):
    if out is not None:
        return into_dtensor_out(
            SCATTER_ND_OUT, out, (input, indices, updates), lambda: scatter_nd(
                input, indices, updates, reduction,
                input_dimension_count=input_dimension_count,
                indices_dimension_count=indices_dimension_count,
                check_indices=check_indices))
    return _scatter.route(input, indices, updates, reduction, input_dimension_count,
                          indices_dimension_count, check_indices, inplace=False)


def _scatter_nd_(input, indices, updates, reduction, input_dimension_count,
                 indices_dimension_count, check_indices):
    return _scatter.route(input, indices, updates, reduction, input_dimension_count,
                          indices_dimension_count, check_indices, inplace=True)


def _top_k1(input, k, axis, direction, index_dtype):
    """The distributed top-k where ``input`` is sharded along ``axis``."""
    if not isinstance(axis, int):
        return None
    ax = axis + input.ndim if axis < 0 else axis
    if not any(isinstance(p, Shard) and p.dim == ax for p in input.placements):
        return None
    return top_k1(input, k, axis, direction, index_dtype)


#: Public function -> what it does with a DTensor input, its arguments in its signature's order.
_ROUTES: Dict[str, Callable[..., Any]] = {
    "gather_nd": _gather_nd,
    "scatter_nd": _scatter_nd,
    "scatter_nd_": _scatter_nd_,
    "top_k1": _top_k1,
}


def route(op: str, input: Any, *args: Any) -> Any:
    """``_subclass.route``: the call's result where it leaves the op's own path, else None."""
    if not isinstance(input, DTensor):
        return None
    return _ROUTES[op](input, *args)


def refusal(op: str, exc: BaseException, *tensors: Any) -> Optional[BaseException]:
    """``_subclass.refusal``: DTensor's refusal of an in-place ``scatter_nd_`` whose target
    would have to change placement, said in the op's terms (``tensors``: the target, indices,
    updates); None for every other failure."""
    if op != "scatter_nd_" or not inplace_placement_refused(exc):
        return None
    input, indices, updates = tensors

    def placements(t):
        return tuple(getattr(t, "placements", ())) or "a plain tensor"
    return RuntimeError(
        f"scatter_nd_: the target DTensor has placements {placements(input)}, which this "
        f"call cannot keep (IndicesTensor {placements(indices)}, UpdatesTensor "
        f"{placements(updates)}); use the functional torch_dml_ops.scatter_nd, which "
        f"returns a new DTensor (the target is unchanged)")
