"""top_k1: DML_OPERATOR_TOP_K1 as a torch op: the k largest (or smallest) along an axis, stable.

Order: by value, NaN greater than +inf (torch.sort's convention) in both directions, -0.0 equal
to +0.0; among equal values the lower index first, in both directions, and at the k-th boundary
the lowest-indexed ties are the ones selected (what torch.topk does not promise).

This module is the op's front: the public functions (``top_k1``, the drop-in ``topk``), the fake
kernel, autograd and the vmap rule.  The kernels, one module per backend:
  ``csrc/top_k1.cpp``            C++ CPU kernel
  ``triton_kernels/top_k1.py``   Triton (CUDA)
  ``portable/top_k1.py``         torch ops (every other device; the reference)
"""
from __future__ import annotations

import enum
from typing import NamedTuple, Optional, Tuple, Union

import torch

from . import _autograd, _backend, _compat, _subclass
from ._checks import as_int, check_level, check_top_k1, raise_documented
from ._levels import PERMISSIVE, _state
from ._library import document, lib
from ._types import Direction

__all__ = ["top_k1", "topk", "AxisDirection", "TopK1Result"]


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


# torch.export.save serializes a program's output structure by name.
_compat.register_namedtuple(TopK1Result, "torch_dml_ops.TopK1Result")


def _top_k1_fake(input, k, axis=-1, direction="decreasing", index_dtype=None,
                 feature_level="permissive"):
    index_dtype = torch.int64 if index_dtype is None else index_dtype
    ax = check_top_k1(input, k, axis, direction, index_dtype, feature_level)
    shape = list(input.shape)
    shape[ax] = k
    return input.new_empty(shape), input.new_empty(shape, dtype=index_dtype)


def _top_k1_setup_context(ctx, inputs, output):
    input, k, axis = inputs[:3]
    ctx.mark_non_differentiable(output[1])
    ctx.save_for_backward(output[1])
    _autograd.save_for_jvp(ctx, output[1])
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


def _top_k1_jvp(ctx, input_t, *_):
    """The values' tangent is the input's tangent at the selected indices."""
    (indices,) = ctx.saved_tensors
    if input_t is None:
        return None, None
    return input_t.gather(ctx.axis, indices.to(torch.int64)), None


def _check_top_k1_args(input, k, axis, direction, index_dtype, level) -> None:
    """check_top_k1 on the op's arguments (index_dtype None is int64)."""
    check_top_k1(input, k, axis, direction, torch.int64 if index_dtype is None else index_dtype,
                 level)


# Shapes without data: FakeTensor, meta, torch.compile, torch.export.
torch.library.register_fake("torch_dml_ops::top_k1", _top_k1_fake, lib=lib)
# Gradient w.r.t. the input values, both modes, any order (the indices output is an integer
# tensor: not differentiable).
TOP_K1 = _autograd.Differentiable("top_k1", _autograd.make_function(
    "TopK1", torch.ops.torch_dml_ops.top_k1.default, _top_k1_setup_context, _top_k1_backward,
    _top_k1_jvp), n_tensors=1, check=_check_top_k1_args)


def _top_k1_vmap(info, in_dims, input, k, axis=-1, direction="decreasing",
                 index_dtype=None, feature_level="permissive"):
    """torch.vmap: the vmapped dimension is one more leading dimension; the axis shifts past it."""
    index_dtype = torch.int64 if index_dtype is None else index_dtype
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
           direction: Union[Direction, AxisDirection] = "decreasing",
           index_dtype: torch.dtype = torch.int64) -> TopK1Result:
    """The ``k`` largest (``direction="decreasing"``) or smallest (``"increasing"``) elements
    of every sequence along ``axis``, sorted in that direction, with their indices.

    Stable: among equal values the lower index comes first, in both directions, and at the k-th
    boundary the lowest-indexed ties are selected.  NaN is greater than +inf (in both
    directions: first when decreasing, last when increasing); -0.0 and +0.0 are equal (a tie).

    Args:
        input: any rank >= 1; float32, float16, bfloat16, float64, int64, int32, int16, int8,
            uint8, uint16, uint32, uint64, bool (uint16/uint32/uint64/bool are refused by
            ``torch.topk``).
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
    if type(input) is not torch.Tensor:
        # a subclass: a DTensor sharded along axis takes the distributed top-k (_subclass)
        routed = _subclass.route("top_k1", input, k, axis, direction, index_dtype)
        if routed is not None:
            return routed
    d = _direction(direction)
    k, axis = as_int("top_k1", "k", k), as_int("top_k1", "axis", axis)
    level = _state.level
    if _compat.AOTI_MISREADS_DTYPE_ARGS and level == PERMISSIVE and _compat.exporting():
        # No dtype argument in an exported graph on torch 2.10 (_compat): the op's int64
        # indices, then a cast, exact once the rules (checked here) hold.
        _check_top_k1_args(input, k, axis, d, index_dtype, level)
        v, i = TOP_K1.call_public(input, k, axis, d, None, level)
        return TopK1Result(v, i if index_dtype in (None, torch.int64) else i.to(index_dtype))
    if level != PERMISSIVE:
        check_level(lambda: _check_top_k1_args(input, k, axis, d, index_dtype, level))
    try:
        return TopK1Result(*TOP_K1.call_public(input, k, axis, d, index_dtype, level))
    except Exception:
        # The documented exception for a refused call, with the kernel's message (see gather_nd).
        raise_documented(lambda: _check_top_k1_args(input, k, axis, d, index_dtype, level))
        raise


def _check_topk_out(out: object, input: torch.Tensor, k: int) -> None:
    """``torch.topk``'s checks of ``out=(values, indices)``, with its exception types."""
    if not (isinstance(out, (tuple, list)) and len(out) == 2
            and all(isinstance(t, torch.Tensor) for t in out)):
        raise TypeError("topk(): argument 'out' must be a tuple of two Tensors (values, indices)")
    for name, t, dtype in (("values", out[0], input.dtype), ("indices", out[1], torch.int64)):
        if t.dtype != dtype:
            raise RuntimeError(f"topk(): expected out {name} tensor to have dtype {dtype}, but "
                               f"got {t.dtype} instead")
        if t.device != input.device:
            raise RuntimeError(f"topk(): expected out {name} tensor to have device "
                               f"{input.device}, but got {t.device} instead")
    if torch.is_grad_enabled() and (input.requires_grad or out[0].requires_grad):
        raise RuntimeError("topk(): functions with out=... arguments don't support "
                           "automatic differentiation, but one of the arguments requires "
                           "grad.")


def topk(input: torch.Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True,
         *, out: Optional[Tuple[torch.Tensor, torch.Tensor]] = None
         ) -> "torch.return_types.topk":
    """A drop-in, stable :func:`torch.topk`: the same arguments, accepted inputs and return type
    (``torch.return_types.topk``), with :func:`top_k1`'s order: among equal values the lower
    index first, and at the k-th boundary the lowest-indexed ties are selected; NaN above +inf.

    Beyond ``top_k1``'s DirectML rules it takes what ``torch.topk`` takes: ``k = 0`` (empty
    results), 0-dim tensors (``k`` 0 or 1, ``dim`` -1 or 0), and ``out=(values, indices)``
    (resized like torch's ``out=`` tensors; indices are int64).  ``sorted=False`` is accepted and
    the result is sorted anyway (torch allows any order then).  Every dtype of ``top_k1`` works,
    including the unsigned ones and bool that ``torch.topk`` refuses.  Differentiable like
    ``top_k1`` (w.r.t. ``input``, both modes).
    """
    if not isinstance(input, torch.Tensor):
        raise TypeError(f"topk(): argument 'input' must be Tensor, not {type(input).__name__}")
    k, dim = as_int("topk", "k", k), as_int("topk", "dim", dim)
    for name, flag in (("largest", largest), ("sorted", sorted)):
        if not isinstance(flag, bool):
            raise TypeError(f"topk(): argument '{name}' must be bool, not {type(flag).__name__}")
    r = input.dim()
    if not -max(r, 1) <= dim < max(r, 1):
        raise IndexError(f"topk(): Dimension out of range (expected to be in range of "
                         f"[{-max(r, 1)}, {max(r, 1) - 1}], but got {dim})")
    n = input.shape[dim] if r else 1
    if not 0 <= k <= n:
        raise RuntimeError(f"topk(): selected index k out of range: k={k} for a dimension of "
                           f"size {n}")
    if input.is_complex():      # torch.topk's exception type (top_k1 raises ConstraintTypeError)
        raise _compat.topk_refusal(input.dtype)(
            f"topk(): complex dtypes are not supported, got {input.dtype}")
    if out is not None:         # checked before anything is computed or written
        _check_topk_out(out, input, k)
    direction: Direction = "decreasing" if largest else "increasing"
    if r == 0:
        # torch.topk returns 0-dim results for a 0-dim input, k = 0 included.
        v, i = top_k1(input.reshape(1), 1, 0, direction)
        v, i = v.reshape(()), i.reshape(())
    elif k == 0:
        ax = dim % r
        v = input.narrow(ax, 0, 0).clone()
        i = torch.empty(v.shape, dtype=torch.int64, device=input.device)
    else:
        v, i = top_k1(input, k, dim, direction)
    if out is not None:
        ov, oi = out
        if ov.shape != v.shape:
            ov.resize_(v.shape)
        if oi.shape != i.shape:
            oi.resize_(i.shape)
        ov.copy_(v)
        oi.copy_(i)
        v, i = ov, oi
    return torch.return_types.topk((v, i))


# Docstrings for torch.ops.torch_dml_ops.* (help() on the dispatcher's objects).
document("top_k1", """\
DML_OPERATOR_TOP_K1: the ``k`` largest ("decreasing") or smallest ("increasing")
elements along ``axis``, sorted, stable (the lower index first among equal values, NaN above
+inf).  The registered op behind :func:`torch_dml_ops.top_k1`; ``index_dtype`` None means
int64.  Differentiable w.r.t. ``input`` (both modes, any order).""")
