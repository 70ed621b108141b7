"""gather_nd: DML_OPERATOR_GATHER_ND / GATHER_ND1 (= ONNX GatherND, TF gather_nd) as a torch op.

This module is the op's front: the public function, the fake kernel, autograd and the vmap rule.
The kernels, one module per backend, all registered on the one op (``_backend`` says which key):
  ``csrc/gather_nd.cpp``            C++ CPU kernels (``gather_nd``, ``_out``, ``_backward``)
  ``triton_kernels/gather_nd.py``   Triton (CUDA)
  ``portable/gather_nd.py``         torch ops (every other device; the reference)

The schema is written in ``_schemas.py``; the C++ extension defines the op from it
(``csrc/registration.cpp``), or Python does without the extension.  The op is opaque to torch.compile, so a compiled graph calls the same kernels as
eager code (``triton_op`` would trace the body into Inductor, which then has to be
fake-traceable, and the data-dependent index check is not).
"""
from __future__ import annotations

from typing import Optional

import torch

from . import _autograd, _backend, _subclass
from ._checks import (as_int, check_bool, check_gather_nd, check_level, check_out,
                      check_out_meta, check_tensors, raise_documented)
from ._forms import backward_layout, indexed_sizes
from ._levels import PERMISSIVE, _state
from ._inductor_fixes import lower_storage_offset
from ._library import document, lib
from ._tables import SIGNED_INDEX_DTYPES
from .portable._common import in_range

__all__ = ["gather_nd"]


def _gather_nd_fake(input, indices, batch_dims=0, input_dimension_count=None,
                    indices_dimension_count=None, feature_level="permissive", check_indices=True):
    lay = check_gather_nd(input, indices, batch_dims, input_dimension_count,
                          indices_dimension_count, feature_level, check_indices)
    return input.new_empty(lay.out_shape)


def _gather_nd_out_fake(input, indices, batch_dims=0, input_dimension_count=None,
                        indices_dimension_count=None, feature_level="permissive",
                        check_indices=True, *, out):
    lower_storage_offset()      # out may be a view: see _inductor_fixes
    lay = check_gather_nd(input, indices, batch_dims, input_dimension_count,
                          indices_dimension_count, feature_level, check_indices)
    check_out_meta("gather_nd", out, lay.out_shape, input.dtype, input.device)


# ---------------------------------------------------------------------------------------------
# Backward: grad_input = scatter-add of grad at the gathered positions (duplicates accumulate);
# the kernels: portable/gather_nd.py and csrc/gather_nd.cpp.
# ---------------------------------------------------------------------------------------------

def _gather_nd_backward_fake(grad, indices, index_sizes, batch_dims, input_dimension_count,
                             indices_dimension_count):
    input_shape, _ = backward_layout(grad.shape, indices.shape, index_sizes, batch_dims,
                                     input_dimension_count, indices_dimension_count)
    return grad.new_empty(input_shape)


def _gather_nd_setup_context(ctx, inputs, output):
    input, indices, batch_dims, idc_in, idc_idx = inputs[:5]
    ctx.save_for_backward(indices)
    _autograd.save_for_jvp(ctx, indices)
    # Only the indexed dims' sizes: the backward takes the rest from grad (so that it shards).
    ctx.index_sizes = indexed_sizes(input.shape, indices.shape, batch_dims, idc_in)
    ctx.args = (batch_dims, idc_in, idc_idx)
    ctx.check = inputs[6]          # False: out-of-range tuples gave zeros


def tuples_in_range(indices: torch.Tensor, index_sizes) -> torch.Tensor:
    """Bool, ``indices.shape[:-1]``: whether every coordinate of each tuple is in range for the
    indexed sizes (the tuples a ``check_indices=False`` call does not skip).  Torch ops only, on
    the indices' device, no host sync."""
    i = indices.view(torch.int64) if indices.dtype == torch.uint64 else indices.to(torch.int64)
    return in_range(i, index_sizes, indices.dtype in SIGNED_INDEX_DTYPES)


def _skip_bad_tuples(ctx, grad, indices):
    """``check_indices=False``: the backward of the tuples the forward gathered, only (the
    others gave zeros, which depend on nothing): their grad rows zeroed, their coordinates
    replaced by in-range ones, so the backward op (which checks) accepts them.  ``None`` when no
    tuple can be in range (an empty indexed dimension)."""
    if 0 in ctx.index_sizes:
        return None
    _, lay = backward_layout(grad.shape, indices.shape, ctx.index_sizes, *ctx.args)
    ok = tuples_in_range(indices, ctx.index_sizes)
    rows = ok.reshape(tuple(lay.natural_indices_shape[:-1]) + (1,) * len(lay.slice_shape))
    grad = torch.where(rows, grad.reshape(lay.natural_out_shape), 0).reshape(grad.shape)
    i = indices.view(torch.int64) if indices.dtype == torch.uint64 else indices.to(torch.int64)
    return grad, torch.where(ok.unsqueeze(-1), i, 0)


def _gather_nd_backward(ctx, grad):
    (indices,) = ctx.saved_tensors
    grad_input = None
    if ctx.needs_input_grad[0]:
        if not ctx.check:
            kept = _skip_bad_tuples(ctx, grad, indices)
            if kept is None:
                input_shape, _ = backward_layout(grad.shape, indices.shape, ctx.index_sizes,
                                                 *ctx.args)
                return grad.new_zeros(input_shape), None, None, None, None, None, None
            grad, indices = kept
        grad_input = GATHER_ND_BACKWARD.call(grad, indices, ctx.index_sizes, *ctx.args)
    return grad_input, None, None, None, None, None, None


def _gather_nd_jvp(ctx, input_t, *_):
    # Linear in the input: the tangent is gathered like the input.
    (indices,) = ctx.saved_tensors
    if input_t is None:
        return None
    return GATHER_ND.call(input_t, indices, *ctx.args, "permissive", False)


def _gather_nd_backward_setup_context(ctx, inputs, output):
    grad, indices, index_sizes, batch_dims, idc_in, idc_idx = inputs
    ctx.save_for_backward(indices)
    _autograd.save_for_jvp(ctx, indices)
    ctx.index_sizes = list(index_sizes)
    ctx.args = (batch_dims, idc_in, idc_idx)


def _gather_nd_backward_backward(ctx, gg):
    # gather_nd_backward is linear in grad: its adjoint is gather_nd itself.
    (indices,) = ctx.saved_tensors
    g = None
    if ctx.needs_input_grad[0]:
        g = GATHER_ND.call(gg, indices, *ctx.args, "permissive", False)
    return g, None, None, None, None, None


def _gather_nd_backward_jvp(ctx, grad_t, *_):
    (indices,) = ctx.saved_tensors
    if grad_t is None:
        return None
    return GATHER_ND_BACKWARD.call(grad_t, indices, ctx.index_sizes, *ctx.args)


# Shapes without data: FakeTensor, meta, torch.compile, torch.export.
torch.library.register_fake("torch_dml_ops::gather_nd", _gather_nd_fake, lib=lib)
torch.library.register_fake("torch_dml_ops::gather_nd_out", _gather_nd_out_fake, lib=lib)
torch.library.register_fake("torch_dml_ops::gather_nd_backward", _gather_nd_backward_fake, lib=lib)
# Reverse and forward mode, any order, torch.func included (_autograd.py says why not
# torch.library.register_autograd); indices are not differentiable.
GATHER_ND = _autograd.Differentiable("gather_nd", _autograd.make_function(
    "GatherND", torch.ops.torch_dml_ops.gather_nd.default, _gather_nd_setup_context,
    _gather_nd_backward, _gather_nd_jvp, n_tensors=2), n_tensors=2, check=check_gather_nd)
GATHER_ND_BACKWARD = _autograd.Differentiable("gather_nd_backward", _autograd.make_function(
    "GatherNDBackward", torch.ops.torch_dml_ops.gather_nd_backward.default,
    _gather_nd_backward_setup_context, _gather_nd_backward_backward, _gather_nd_backward_jvp,
    n_tensors=2), n_tensors=2)
GATHER_ND_OUT = _autograd.OutOverload("gather_nd_out", "gather_nd", n_tensors=2,
                                      check=check_gather_nd)


def _gather_nd_vmap(info, in_dims, input, indices, batch_dims=0, input_dimension_count=None,
                    indices_dimension_count=None, feature_level="permissive", check_indices=True):
    """torch.vmap: the vmapped dimension becomes one more batch dimension of the natural form
    (a DML-form call is checked as written, then run in its natural form and padded back)."""
    lay = check_gather_nd(_backend.logical(input, in_dims[0]),
                          _backend.logical(indices, in_dims[1]), batch_dims,
                          input_dimension_count, indices_dimension_count, feature_level)
    x, i = _backend.vmap_operands(info, in_dims[:2], (input, indices))
    b = info.batch_size
    if lay.dml_form:
        x = x.reshape((b,) + tuple(lay.natural_input_shape))
        i = i.reshape((b,) + tuple(lay.natural_indices_shape))
    out = _OP(x, i, lay.batch_dims + 1, None, None, "permissive", check_indices)
    if lay.dml_form:
        out = out.reshape((b,) + tuple(lay.out_shape))
    return out, 0


def _gather_nd_backward_vmap(info, in_dims, grad, indices, index_sizes, batch_dims,
                             input_dimension_count, indices_dimension_count):
    input_shape, lay = backward_layout(
        _backend.logical(grad, in_dims[0]).shape, _backend.logical(indices, in_dims[1]).shape,
        index_sizes, batch_dims, input_dimension_count, indices_dimension_count)
    g, i = _backend.vmap_operands(info, in_dims[:2], (grad, indices))
    b = info.batch_size
    if lay.dml_form:
        g = g.reshape((b,) + tuple(lay.natural_out_shape))
        i = i.reshape((b,) + tuple(lay.natural_indices_shape))
    out = torch.ops.torch_dml_ops.gather_nd_backward(
        g, i, list(index_sizes), lay.batch_dims + 1, None, None)
    return out.reshape((b,) + tuple(input_shape)), 0


# torch.vmap without the per-sample fallback loop (both forms).
torch.library.register_vmap("torch_dml_ops::gather_nd", _gather_nd_vmap, lib=lib)
torch.library.register_vmap("torch_dml_ops::gather_nd_backward", _gather_nd_backward_vmap, lib=lib)

_OP = torch.ops.torch_dml_ops.gather_nd.default


def gather_nd(input: torch.Tensor, indices: torch.Tensor, batch_dims: int = 0, *,
              input_dimension_count: Optional[int] = None,
              indices_dimension_count: Optional[int] = None,
              check_indices: bool = True,
              out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Gather slices of ``input`` addressed by the index tuples in ``indices``.

    ``out[i_0, ..., i_{q-2}, ...] = input[b..., *indices[i_0, ..., i_{q-2}, :], ...]``: each
    index tuple (the last dimension of ``indices``, of size ``k``) addresses dimensions
    ``batch_dims .. batch_dims + k - 1`` of ``input`` and selects the whole trailing slice.

    Natural form (ONNX GatherND, ``tf.gather_nd``): tensors carry only their meaningful dimensions
    and ``out.shape == indices.shape[:-1] + input.shape[batch_dims + k:]``.

    DML form (``input_dimension_count`` and ``indices_dimension_count`` given): ``input`` and
    ``indices`` have the same DimensionCount N, padded with leading 1s; only their trailing
    ``*_dimension_count`` dims are meaningful, and the result is right-aligned into N dims.

    Args:
        input: data, shape ``[*batch, *indexed(k), *slice]``. Data types: float32, float16,
            bfloat16, float64, int64, int32, int16, int8, uint8, uint16, uint32, uint64, bool (the
            DirectML levels allow float32, float16, int32, int16, int8, uint32, uint16, uint8).
            Any strides.
        indices: integer tuples, shape ``[*batch, ..., k]``, dtype int64, int32, uint64 or uint32.
            Negative values of a signed type count from the end of their dimension.
        batch_dims: leading dimensions shared by ``input`` and ``indices`` (DML_GATHER_ND1's
            BatchDimensionCount; from DML_FEATURE_LEVEL_3_0).
        input_dimension_count, indices_dimension_count: select the DML form.
        check_indices: ``True``: an out-of-range index raises ``IndexError`` (naming the value
            and its position).  ``False``: it is not an error; the tuple's slice of the result
            is zeros, on every backend (its gradient is zero).  What ``False`` saves is the
            Triton path's host sync; the CPU backends check every coordinate either way (fused
            into the copy, or one min/max pass they need to wrap negative indices), so only a
            call that has a bad tuple costs them a second pass.  No backend ever reads or writes
            out of bounds, whatever the flag.
        out: optional preallocated result (exact shape, dtype, device; must not overlap the
            inputs).  Not differentiable, like torch's ``out=`` functions.

    Feature levels: inside ``with torch_dml_ops.feature_level("2_1"):`` the DirectML tables of that
    level are enforced (see docs/semantics.md).

    Raises:
        ConstraintError (a ValueError): a shape, rank or feature-level rule is violated.
        ConstraintTypeError (a ConstraintError and a TypeError): an unsupported dtype.
        IndexError: an index is out of range (names its value and position) and
            ``check_indices`` is True.

    Gradient: w.r.t. ``input``; duplicate tuples accumulate.  Deterministic on CPU.

    Example:
        >>> x = torch.tensor([[0., 1.], [2., 3.]])
        >>> gather_nd(x, torch.tensor([[1], [0]]))
        tensor([[2., 3.],
                [0., 1.]])
    """
    if type(input) is not torch.Tensor:     # a subclass: a DTensor's out= (_subclass)
        routed = _subclass.route("gather_nd", input, indices, batch_dims, input_dimension_count,
                                 indices_dimension_count, check_indices, out)
        if routed is not None:
            return routed
    level = _state.level
    batch_dims = as_int("gather_nd", "batch_dims", batch_dims)
    if type(check_indices) is not bool:     # the dispatcher would take an int for a bool
        check_bool("gather_nd", "check_indices", check_indices)
    args = (input, indices, batch_dims, input_dimension_count, indices_dimension_count, level,
            check_indices)
    if level != PERMISSIVE:
        check_level(lambda: _check_call(*args, out))
    try:
        if out is None:
            return GATHER_ND.call_public(*args)
        check_tensors("gather_nd", input, indices, out=out)
        GATHER_ND_OUT.call((input, indices, out), *args, out=out)
        return out
    except Exception:
        # The kernel refused the call (it checks every rule it needs itself).  The Python checks
        # raise the documented exception for it, with the same message (ConstraintTypeError is
        # a TypeError, which a C++ kernel cannot raise); a refusal they do not cover (a bad
        # index) propagates as it is.  They cost nothing on calls that succeed.
        raise_documented(lambda: _check_call(*args, out))
        raise


def _check_call(input, indices, batch_dims, input_dimension_count, indices_dimension_count,
                level, check_indices, out) -> None:
    """The Python checks of a public call (raise_documented runs them)."""
    lay = check_gather_nd(input, indices, batch_dims, input_dimension_count,
                          indices_dimension_count, level, check_indices)
    if out is not None:
        check_out("gather_nd", out, lay.out_shape, input.dtype, input.device,
                  (("InputTensor", input), ("IndicesTensor", indices)))


# Docstrings for torch.ops.torch_dml_ops.* (help() on the dispatcher's objects).
document("gather_nd", """\
DML_OPERATOR_GATHER_ND / GATHER_ND1 (ONNX GatherND): the slices of ``input`` addressed by
the index tuples in ``indices``, after ``batch_dims`` shared leading dimensions.  The registered
op behind :func:`torch_dml_ops.gather_nd`, which documents every argument; ``feature_level`` is a
canonical level name ("permissive", "2_1", "3_0", "3_1"); ``check_indices=False`` gives zero
slices for out-of-range tuples instead of an IndexError, on every backend.  Differentiable
w.r.t. ``input`` (both modes, any order).""")
document("gather_nd_out", """\
:func:`torch_dml_ops.gather_nd` into a preallocated ``out`` (exact shape and dtype, no
overlap with the inputs, written only after every index is checked; ``check_indices=False``:
zero slices for out-of-range tuples).  Not differentiable.""")
document("gather_nd_backward", """\
The gradient of gather_nd w.r.t. its input: ``grad`` scatter-added at the gathered
positions into zeros of the input's shape (duplicates accumulate).  ``index_sizes`` are the
sizes of the k indexed input dimensions; the batch and trailing ones are ``grad``'s (so the op
carries no global shape and shards under DTensor).  Linear; differentiable.""")
