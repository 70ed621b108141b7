"""DTensor sharding rules for the functional ops (``torch.distributed.tensor.experimental.
register_sharding``): the placements under which each op runs on the local shards with no
collective, and all-Replicate otherwise (DTensor then redistributes the inputs).

One mesh dimension's view: ``register_sharding`` expands each rule over every mesh dimension.
"""
from __future__ import annotations

import dataclasses

import torch
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
from torch.distributed.tensor.experimental import register_sharding

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


def _with_out(rules, n_args):
    """The rules of a functional op for its ``out=`` form: ``out`` placed as the output."""
    return [([], ins + [None] * (n_args - len(ins)) + outs) for outs, ins in rules]


def _scatter_nd_inplace_rules(input, indices, updates, *rest):
    return _no_output(_scatter_nd_rules(input, indices, updates, *rest))


def _scatter_nd_out_rules(input, indices, updates, *rest, out=None):
    return _with_out(_scatter_nd_rules(input, indices, updates, *rest), 9)


def _gather_nd_out_rules(input, indices, *rest, out=None):
    return _with_out(_gather_nd_rules(input, indices, *rest), 7)


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


_registered = False


def register() -> None:
    """Register the rules (once)."""
    global _registered
    if _registered:
        return
    register_sharding(_ops.gather_nd.default)(_gather_nd_rules)
    register_sharding(_ops.scatter_nd.default)(_scatter_nd_rules)
    register_sharding(_ops.top_k1.default)(_top_k1_rules)
    register_sharding(_ops.gather_nd_backward.default)(_gather_nd_backward_rules)
    register_sharding(_ops.scatter_nd_.default)(_scatter_nd_inplace_rules)
    register_sharding(_ops.scatter_nd_out.default)(_scatter_nd_out_rules)
    register_sharding(_ops.gather_nd_out.default)(_gather_nd_out_rules)
    for op in (_ops.scatter_nd_out.default, _ops.gather_nd_out.default):
        _key_on_out(op)
    _registered = True


def _key_on_out(op) -> None:
    """register_sharding keys DTensor's sharding cache on the int arguments only: two calls of an
    ``out=`` overload that differ only in ``out``'s placements would share one strategy (and
    the second run its kernel on shards of the wrong shape).  Key on ``out`` too.  (The public
    functions do not call these overloads with DTensors; ``torch.ops`` callers do.)"""
    prop = DTensor._op_dispatcher.sharding_propagator
    info = getattr(prop, "op_to_schema_info", {}).get(op)
    if info is not None and "out" not in (info.static_kwargkey or []):
        prop.op_to_schema_info[op] = dataclasses.replace(
            info, static_kwargkey=list(info.static_kwargkey or []) + ["out"])
