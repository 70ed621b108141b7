"""DTensor sharding rules for the functional ops (``torch.distributed.tensor.experimental.
register_sharding``): the placements under which each op runs on the local shards with no
collective, and all-Replicate otherwise (DTensor then redistributes the inputs).

One mesh dimension's view: ``register_sharding`` expands each rule over every mesh dimension.
"""
from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
from torch.distributed.tensor.experimental import register_sharding

from .._compat import dtensor_op_handlers, fix_dtensor_ops_without_returns
from ..gather_nd import GATHER_ND_OUT
from ..scatter_nd import SCATTER_ND_OUT
from ._fronts import into_dtensor_out

_ops = torch.ops.torch_dml_ops


def _k(indices) -> int:
    return indices.shape[-1]


def _gather_nd_rules(input, indices, batch_dims=0, input_dimension_count=None,
                     indices_dimension_count=None, feature_level="permissive",
                     check_indices=True):
    extra = [None] * 5
    rules = [([Replicate()], [Replicate(), Replicate()] + extra)]
    if input_dimension_count is not None or indices_dimension_count is not None:
        return rules                      # DML form: replicate
    k = _k(indices)
    tuple_dims = indices.ndim - 1         # the output's leading dims are indices.shape[:-1]
    for d in range(batch_dims):           # a batch dim: input and indices sharded alike
        rules.append(([Shard(d)], [Shard(d), Shard(d)] + extra))
    for d in range(batch_dims, tuple_dims):   # the index tuples' leading dims
        rules.append(([Shard(d)], [Replicate(), Shard(d)] + extra))
    for j in range(batch_dims + k, input.ndim):   # a trailing slice dim
        rules.append(([Shard(tuple_dims + j - batch_dims - k)], [Shard(j), Replicate()] + extra))
    return rules


def _scatter_nd_rules(input, indices, updates, reduction="none", input_dimension_count=None,
                      indices_dimension_count=None, feature_level="permissive",
                      check_indices=True, deterministic=False):
    extra = [None] * 6
    rules = [([Replicate()], [Replicate(), Replicate(), Replicate()] + extra)]
    if input_dimension_count is not None or indices_dimension_count is not None:
        return rules
    k = _k(indices)
    tuple_dims = indices.ndim - 1
    for j in range(k, input.ndim):        # a trailing slice dim of input and updates
        rules.append(([Shard(j)], [Shard(j), Replicate(), Shard(tuple_dims + j - k)] + extra))
    return rules


def _no_output(rules):
    """The rules of a functional op for its in-place form (-> (): no output placements; the
    target is the first input).  DTensor refuses a call whose target would have to change
    placement, saying to use the out-of-place op."""
    return [([], ins) for _, ins in rules]


def _scatter_nd_inplace_rules(input, indices, updates, *rest):
    return _no_output(_scatter_nd_rules(input, indices, updates, *rest))


def _top_k1_rules(input, k, axis=-1, direction="decreasing", index_dtype=None,
                  feature_level="permissive"):
    extra = [None] * 5
    rules = [([Replicate(), Replicate()], [Replicate()] + extra)]
    ax = axis % input.ndim if input.ndim else 0
    for d in range(input.ndim):
        if d != ax:
            rules.append(([Shard(d), Shard(d)], [Shard(d)] + extra))
    return rules


def _gather_nd_backward_rules(grad, indices, index_sizes, batch_dims, input_dimension_count,
                              indices_dimension_count):
    # The op takes only the indexed dims' sizes (the rest of the input's shape is grad's), so a
    # local call on a shard of grad computes its shard of grad_input.
    extra = [None] * 4
    rules = [([Replicate()], [Replicate(), Replicate()] + extra)]
    if input_dimension_count is not None or indices_dimension_count is not None:
        return rules                      # DML form: replicate
    k = _k(indices)
    tuple_dims = indices.ndim - 1
    for d in range(batch_dims):           # a batch dim: grad_input sharded alike
        rules.append(([Shard(d)], [Shard(d), Shard(d)] + extra))
    for d in range(batch_dims, tuple_dims):   # the tuples split: each rank adds its part
        rules.append(([Partial()], [Shard(d), Shard(d)] + extra))
    for t in range(grad.ndim - tuple_dims):   # a trailing slice dim
        rules.append(([Shard(batch_dims + k + t)], [Shard(tuple_dims + t), Replicate()] + extra))
    return rules


def _out_handler(overload, functional):
    """DTensor's handler of an ``out=`` overload called through ``torch.ops``: what the public
    functions do (``_fronts.into_dtensor_out``): the functional op under its rules, then
    ``out.copy_`` to ``out``'s placements, so every ``out`` placement works and a call that fails
    writes nothing.  Returns None, as the schema (``-> ()``) says: DTensor's generic ``out=``
    path returns ``out``, which torch 2.14 refuses for such a schema."""
    def handler(op_call, args, kwargs):
        kwargs = dict(kwargs)
        out = kwargs.pop("out")
        tensors = tuple(a for a in args if isinstance(a, torch.Tensor))
        into_dtensor_out(overload, out, tensors, lambda: functional(*args, **kwargs))
        return None
    return handler


_registered = False


def register() -> None:
    """Register the rules (once), and the handlers of the ``out=`` overloads."""
    global _registered
    if _registered:
        return
    fix_dtensor_ops_without_returns()
    register_sharding(_ops.gather_nd.default)(_gather_nd_rules)
    register_sharding(_ops.scatter_nd.default)(_scatter_nd_rules)
    register_sharding(_ops.top_k1.default)(_top_k1_rules)
    register_sharding(_ops.gather_nd_backward.default)(_gather_nd_backward_rules)
    register_sharding(_ops.scatter_nd_.default)(_scatter_nd_inplace_rules)
    handlers = dtensor_op_handlers()
    if handlers is not None:
        handlers[GATHER_ND_OUT.op] = _out_handler(GATHER_ND_OUT, _ops.gather_nd.default)
        handlers[SCATTER_ND_OUT.op] = _out_handler(SCATTER_ND_OUT, _ops.scatter_nd.default)
    _registered = True
