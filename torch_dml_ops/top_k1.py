"""top_k1: DML_OPERATOR_TOP_K1 as a torch op: the k largest (or smallest) along an axis, stable.

Order: by value, NaN greater than +inf (torch.sort's convention) in both directions, -0.0 equal
to +0.0; among equal values the lower index first, in both directions, and at the k-th boundary
the lowest-indexed ties are the ones selected (what torch.topk does not promise).

Layers, as for gather_nd:
  ``top_k1``                     public function: direction / AxisDirection, feature level
  ``torch_dml_ops::top_k1``      the registered op, ``_top_k1_impl`` its kernel
  ``_top_k1_fake``               shapes only
  ``_top_k1_backward``           grad_input = zeros with the values' gradient scattered back
  ``top_k1_torch``               portable path (``_fallback.py``)
  ``top_k1_triton``              Triton launcher (``triton_kernels/top_k1.py``)
  ``top_k1_native``              native CPU kernel (``_native_topk.py``, ``csrc/topk.c``)
"""
from __future__ import annotations

import enum
from typing import NamedTuple, Union

import torch

from . import _backend, _native_topk
from ._fallback import top_k1_torch
from ._library import lib
from ._validation import _state, check_top_k1

__all__ = ["top_k1", "AxisDirection", "TopK1Result"]


class AxisDirection(enum.IntEnum):
    """DML_AXIS_DIRECTION, with directml.h's names and values."""
    DML_AXIS_DIRECTION_INCREASING = 0
    DML_AXIS_DIRECTION_DECREASING = 1
    INCREASING = 0
    DECREASING = 1


class TopK1Result(NamedTuple):
    """``(values, indices)``, like ``torch.return_types.topk``."""
    values: torch.Tensor
    indices: torch.Tensor


lib.define("top_k1(Tensor input, int k, int axis=-1, str direction='decreasing', "
           "ScalarType index_dtype=long, str feature_level='permissive') "
           "-> (Tensor values, Tensor indices)")


def _top_k1_impl(input, k, axis=-1, direction="decreasing", index_dtype=torch.int64,
                 feature_level="permissive"):
    ax = check_top_k1(input, k, axis, direction, index_dtype, feature_level)
    largest = direction == "decreasing"
    backend = _backend.backend_for(input)
    if backend == "triton":
        from . import triton_kernels as tk
        if tk.top_k1_triton_supports(input.dtype, k):
            return tk.top_k1_triton(input, k, ax, largest, index_dtype)
    elif backend == "native" and _native_topk.supports(input, k, ax):
        return _native_topk.top_k1_native(input, k, ax, largest, index_dtype)
    return top_k1_torch(input, k, ax, largest, index_dtype)


def _top_k1_fake(input, k, axis=-1, direction="decreasing", index_dtype=torch.int64,
                 feature_level="permissive"):
    ax = check_top_k1(input, k, axis, direction, index_dtype, feature_level)
    shape = list(input.shape)
    shape[ax] = k
    return input.new_empty(shape), input.new_empty(shape, dtype=index_dtype)


def _top_k1_setup_context(ctx, inputs, output):
    input, k, axis = inputs[:3]
    ctx.save_for_backward(output[1])
    ctx.axis = axis % input.dim()
    ctx.input_shape = tuple(input.shape)


def _top_k1_backward(ctx, grad_values, grad_indices):
    """grad_input = zeros, with the values' gradient scattered back along the axis (the indices
    are distinct, so nothing accumulates); aten's scatter is itself differentiable."""
    (indices,) = ctx.saved_tensors
    grad_input = None
    if ctx.needs_input_grad[0]:
        grad_input = grad_values.new_zeros(ctx.input_shape).scatter(
            ctx.axis, indices.to(torch.int64), grad_values)
    return grad_input, None, None, None, None, None


# One kernel for every device; it picks Triton, the native CPU kernel or the portable path.
lib.impl("top_k1", _top_k1_impl, "CompositeExplicitAutograd")
# Shapes without data: FakeTensor, meta, torch.compile, torch.export.
torch.library.register_fake("torch_dml_ops::top_k1", _top_k1_fake, lib=lib)
# Gradient w.r.t. the input values (first and second order).
torch.library.register_autograd("torch_dml_ops::top_k1", _top_k1_backward,
                                setup_context=_top_k1_setup_context, lib=lib)
# The indices output is an integer tensor: not differentiable.


def _top_k1_vmap(info, in_dims, input, k, axis=-1, direction="decreasing",
                 index_dtype=torch.int64, feature_level="permissive"):
    """torch.vmap: the vmapped dimension is one more leading dimension; the axis shifts past it."""
    ax = check_top_k1(_backend.logical(input, in_dims[0]), k, axis, direction, index_dtype,
                      feature_level)
    (x,) = _backend.vmap_operands(info, in_dims[:1], (input,))
    v, i = _OP(x, k, ax + 1, direction, index_dtype, "permissive")
    return (v, i), (0, 0)


# torch.vmap without the per-sample fallback loop.
torch.library.register_vmap("torch_dml_ops::top_k1", _top_k1_vmap, lib=lib)

_OP = torch.ops.torch_dml_ops.top_k1.default

_DIRECTION_NAMES = {
    "decreasing": "decreasing", "increasing": "increasing",
    "DML_AXIS_DIRECTION_DECREASING": "decreasing", "DML_AXIS_DIRECTION_INCREASING": "increasing",
    "DECREASING": "decreasing", "INCREASING": "increasing",
}


def _direction(direction: Union[str, AxisDirection, int]) -> str:
    if isinstance(direction, AxisDirection):
        return "decreasing" if direction == AxisDirection.DECREASING else "increasing"
    if isinstance(direction, str) and direction in _DIRECTION_NAMES:
        return _DIRECTION_NAMES[direction]
    raise ValueError(f"top_k1: direction must be 'decreasing', 'increasing' or an AxisDirection, "
                     f"got {direction!r}")


def top_k1(input: torch.Tensor, k: int, axis: int = -1,
           direction: Union[str, AxisDirection] = "decreasing",
           index_dtype: torch.dtype = torch.int64) -> TopK1Result:
    """The ``k`` largest (``direction="decreasing"``) or smallest (``"increasing"``) elements
    of every sequence along ``axis``, sorted in that direction, with their indices.

    Stable: among equal values the lower index comes first, in both directions, and at the k-th
    boundary the lowest-indexed ties are selected.  NaN is greater than +inf (in both
    directions: first when decreasing, last when increasing); -0.0 and +0.0 are equal (a tie).

    Args:
        input: any rank >= 1; float32, float16, bfloat16, float64, int64, int32, int16, int8,
            uint8, uint16, uint32, bool (uint16/uint32/bool are refused by ``torch.topk``).
        k: 1 <= k <= input.shape[axis]; k equal to the size is a full stable sort.
        axis: any axis, negative counts from the end.
        direction: "decreasing" / "increasing", or ``AxisDirection.DML_AXIS_DIRECTION_*``.
        index_dtype: torch.int64 (default), torch.int32, or torch.uint32 (DirectML's
            OutputIndexTensor type, required under a feature level).

    Returns:
        ``TopK1Result(values, indices)``: ``input``'s shape with ``k`` along ``axis``.

    Raises:
        ConstraintError (ValueError): k out of range, rank or feature-level rules.
        ConstraintIndexError (a ConstraintError and an IndexError): axis out of range.
        ConstraintTypeError (a ConstraintError and a TypeError): unsupported dtype.

    Gradient: w.r.t. ``input`` (the values' gradient scattered back at the indices).

    Example:
        >>> top_k1(torch.tensor([1., 2, 2, 3]), 3)
        TopK1Result(values=tensor([3., 2., 2.]), indices=tensor([3, 1, 2]))
    """
    d = _direction(direction)
    level = _state.level
    if _backend.plain_eager_call((input,), (input,)):
        v, i = _top_k1_impl(input, k, axis, d, index_dtype, level)
    else:
        v, i = _OP(input, k, axis, d, index_dtype, level)
    return TopK1Result(v, i)
