"""gather_nd: DML_OPERATOR_GATHER_ND / GATHER_ND1 (= ONNX GatherND, TF gather_nd) as a torch op.

Layers (each greppable by suffix):
  ``gather_nd``                  public function: reads the feature level, handles ``out=``
  ``torch_dml_ops::gather_nd``   the registered op (schema below), ``_gather_nd_impl`` its kernel
  ``_gather_nd_fake``            shapes only, for FakeTensor / meta / torch.compile / export
  ``_gather_nd_backward``        autograd: a scatter-add, itself a registered op with a backward
  ``gather_nd_torch``            portable path (``_fallback.py``)
  ``gather_nd_triton``           Triton launcher (``triton_kernels/gather_nd.py``)

Registration: ``torch.library`` schema + a CompositeExplicitAutograd kernel (one Python kernel for
every device, which picks the backend at run time) + ``register_fake`` + an Autograd kernel
applying one ``autograd.Function`` (``_autograd.py``: reverse and forward mode, torch.func).
The op is opaque to torch.compile, so a compiled graph calls the same kernel on CPU and CUDA and
its behaviour does not depend on the device (``triton_op`` would trace the body into Inductor,
which then has to be fake-traceable, and the data-dependent index check is not).
"""
from __future__ import annotations

from typing import Optional

import torch

from . import _autograd, _backend, _native_gather_scatter
from ._fallback import (check_and_wrap_plan, gather_nd_torch, index_matrix,
                        linear_rows)
from ._forms import GatherLayout, gather_layout
from ._library import document, lib
from ._validation import (SIGNED_INDEX_DTYPES, _state, as_int, check_gather_nd, check_out,
                          check_out_meta, check_storages, check_tensors, raise_index_error,
                          resolved, written)

__all__ = ["gather_nd"]

_ARGS = ("Tensor input, Tensor indices, int batch_dims=0, int? input_dimension_count=None, "
         "int? indices_dimension_count=None, str feature_level='permissive', "
         "bool check_indices=True")
# Functional op: what autograd, compile and export see.
lib.define(f"gather_nd({_ARGS}) -> Tensor")
# out= variant: writes into a preallocated output (no autograd, like torch's out= ops).
lib.define(f"gather_nd_out({_ARGS}, *, Tensor(a!) out) -> ()")
# Backward: scatter-add of the output gradient into zeros of the input's shape.
lib.define("gather_nd_backward(Tensor grad, Tensor indices, SymInt[] input_shape, int batch_dims, "
           "int? input_dimension_count, int? indices_dimension_count) -> Tensor")


def _gather_into(out: Optional[torch.Tensor], input: torch.Tensor, indices: torch.Tensor,
                 lay: GatherLayout, check: bool) -> torch.Tensor:
    """Run the chosen backend; writes into ``out`` (the caller's ``out=``) or a new tensor.

    On failure nothing the caller owns is modified: the portable path checks before it writes;
    the native kernel checks a caller's ``out=`` in a check-only pass before it copies;
    the Triton path writes a fresh output in the same pass as the check, but checks a caller's
    ``out=`` in a separate pre-pass (it reads only the indices).
    """
    backend = _backend.backend_for(input)
    if backend == "native":
        res = _native_gather_scatter.gather_nd_native(input, indices, lay, out)
        if res is not None:
            return res
    if backend != "triton":
        return gather_nd_torch(input, indices, lay, check, out)
    from . import triton_kernels
    nat_input = input.reshape(lay.natural_input_shape)
    nat_indices = indices.reshape(lay.natural_indices_shape)
    user_out = out is not None
    if out is None:
        out = torch.empty(lay.out_shape, dtype=input.dtype, device=input.device)

    def run(check_now: bool, move: bool) -> None:
        flag = triton_kernels.gather_nd_triton(out, nat_input, nat_indices, lay.batch_dims,
                                               check_now, move)
        if flag is not None:
            pos = int(flag.item())   # the one host sync of a checked call
            if pos != 2**63 - 1:
                raise_index_error("gather_nd", indices, pos, indices.shape, lay.index_sizes,
                                  lay.dim_names(input.dim()),
                                  indices.dtype in SIGNED_INDEX_DTYPES, lay.k)

    if check and user_out:
        run(True, False)
        run(False, True)
    else:
        run(check, True)
    return out


def _gather_nd_impl(input, indices, batch_dims=0, input_dimension_count=None,
                    indices_dimension_count=None, feature_level="permissive", check_indices=True):
    lay = check_gather_nd(input, indices, batch_dims, input_dimension_count,
                          indices_dimension_count, feature_level, check_indices)
    check_storages("gather_nd", ("InputTensor", input), ("IndicesTensor", indices))
    return _gather_into(None, resolved(input), resolved(indices), lay, check_indices)


def _gather_nd_out_impl(input, indices, batch_dims=0, input_dimension_count=None,
                        indices_dimension_count=None, feature_level="permissive",
                        check_indices=True, *, out):
    lay = check_gather_nd(input, indices, batch_dims, input_dimension_count,
                          indices_dimension_count, feature_level, check_indices)
    check_out("gather_nd", out, lay.out_shape, input.dtype, input.device,
              (("InputTensor", input), ("IndicesTensor", indices)))
    check_storages("gather_nd", ("InputTensor", input), ("IndicesTensor", indices),
                   ("OutputTensor (out)", out))
    input, indices = resolved(input), resolved(indices)
    if out.is_neg():
        # A negative view: the kernels write raw memory, copy_ writes through the negation.
        out.copy_(_gather_into(None, input, indices, lay, check_indices))
    else:
        _gather_into(out, input, indices, lay, check_indices)
        written(out)


def _gather_nd_fake(input, indices, batch_dims=0, input_dimension_count=None,
                    indices_dimension_count=None, feature_level="permissive", check_indices=True):
    lay = check_gather_nd(input, indices, batch_dims, input_dimension_count,
                          indices_dimension_count, feature_level, check_indices)
    return input.new_empty(lay.out_shape)


def _gather_nd_out_fake(input, indices, batch_dims=0, input_dimension_count=None,
                        indices_dimension_count=None, feature_level="permissive",
                        check_indices=True, *, out):
    lay = check_gather_nd(input, indices, batch_dims, input_dimension_count,
                          indices_dimension_count, feature_level, check_indices)
    check_out_meta("gather_nd", out, lay.out_shape, input.dtype)


# ---------------------------------------------------------------------------------------------
# Backward: grad_input = scatter-add of grad at the gathered positions (duplicates accumulate).
# ---------------------------------------------------------------------------------------------

def _gather_nd_backward_impl(grad, indices, input_shape, batch_dims, input_dimension_count,
                             indices_dimension_count):
    lay = gather_layout("gather_nd", input_shape, indices.shape, batch_dims,
                        input_dimension_count, indices_dimension_count)
    sizes = lay.index_sizes
    batch, rows, slice_len, n_tuples = lay.batch, lay.rows, lay.slice_len, lay.n_tuples
    check_storages("gather_nd_backward", ("grad", grad), ("IndicesTensor", indices))
    grad_in = torch.zeros(rows, slice_len, dtype=grad.dtype, device=grad.device)
    indices, grad = resolved(indices), resolved(grad)
    if n_tuples:
        signed = indices.dtype in SIGNED_INDEX_DTYPES
        idx2 = index_matrix(indices, n_tuples, lay.k, rows < 2**31)
        # The forward already range-checked these indices (a direct call of this op may not
        # have, empty slices included); this also finds which columns wrap.
        wrap = check_and_wrap_plan("gather_nd", indices, idx2, sizes, signed,
                                   lay.dim_names(len(input_shape)))
        if grad_in.numel():
            lin = linear_rows(idx2, sizes, wrap, batch, n_tuples // batch)
            grad_in.index_add_(0, lin, grad.reshape(n_tuples, slice_len))
    return grad_in.view(tuple(input_shape))


def _gather_nd_backward_fake(grad, indices, input_shape, batch_dims, input_dimension_count,
                             indices_dimension_count):
    return grad.new_empty(tuple(input_shape))


def _gather_nd_setup_context(ctx, inputs, output):
    input, indices, batch_dims, idc_in, idc_idx = inputs[:5]
    ctx.save_for_backward(indices)
    ctx.save_for_forward(indices)
    ctx.input_shape = tuple(input.shape)
    ctx.args = (batch_dims, idc_in, idc_idx)


def _gather_nd_backward(ctx, grad):
    (indices,) = ctx.saved_tensors
    grad_input = None
    if ctx.needs_input_grad[0]:
        grad_input = GATHER_ND_BACKWARD.call(grad, indices, ctx.input_shape, *ctx.args)
    return grad_input, None, None, None, None, None, None


def _gather_nd_jvp(ctx, input_t, *_):
    # Linear in the input: the tangent is gathered like the input.
    (indices,) = ctx.saved_tensors
    if input_t is None:
        return None
    return GATHER_ND.call(input_t, indices, *ctx.args, "permissive", False)


def _gather_nd_backward_setup_context(ctx, inputs, output):
    grad, indices, input_shape, batch_dims, idc_in, idc_idx = inputs
    ctx.save_for_backward(indices)
    ctx.save_for_forward(indices)
    ctx.input_shape = tuple(input_shape)
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
    return GATHER_ND_BACKWARD.call(grad_t, indices, ctx.input_shape, *ctx.args)


# One kernel for every device; it picks Triton or the portable path per call.
lib.impl("gather_nd", _gather_nd_impl, "CompositeExplicitAutograd")
lib.impl("gather_nd_out", _gather_nd_out_impl, "CompositeExplicitAutograd")
lib.impl("gather_nd_backward", _gather_nd_backward_impl, "CompositeExplicitAutograd")
# Shapes without data: FakeTensor, meta, torch.compile, torch.export.
torch.library.register_fake("torch_dml_ops::gather_nd", _gather_nd_fake, lib=lib)
torch.library.register_fake("torch_dml_ops::gather_nd_out", _gather_nd_out_fake, lib=lib)
torch.library.register_fake("torch_dml_ops::gather_nd_backward", _gather_nd_backward_fake, lib=lib)
# Reverse and forward mode, any order, torch.func included (_autograd.py says why not
# torch.library.register_autograd); indices are not differentiable.
GATHER_ND = _autograd.Differentiable("gather_nd", _autograd.make_function(
    "GatherND", torch.ops.torch_dml_ops.gather_nd.default, _gather_nd_setup_context,
    _gather_nd_backward, _gather_nd_jvp))
GATHER_ND_BACKWARD = _autograd.Differentiable("gather_nd_backward", _autograd.make_function(
    "GatherNDBackward", torch.ops.torch_dml_ops.gather_nd_backward.default,
    _gather_nd_backward_setup_context, _gather_nd_backward_backward, _gather_nd_backward_jvp))
_autograd.register_out("gather_nd_out", "gather_nd")


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


def _gather_nd_backward_vmap(info, in_dims, grad, indices, input_shape, batch_dims,
                             input_dimension_count, indices_dimension_count):
    lay = gather_layout("gather_nd", input_shape,
                        _backend.logical(indices, in_dims[1]).shape, batch_dims,
                        input_dimension_count, indices_dimension_count)
    g, i = _backend.vmap_operands(info, in_dims[:2], (grad, indices))
    b = info.batch_size
    if lay.dml_form:
        g = g.reshape((b,) + tuple(lay.natural_out_shape))
        i = i.reshape((b,) + tuple(lay.natural_indices_shape))
    out = torch.ops.torch_dml_ops.gather_nd_backward(
        g, i, [b] + list(lay.natural_input_shape), lay.batch_dims + 1, None, None)
    return out.reshape([b] + list(input_shape)), 0


# torch.vmap without the per-sample fallback loop (both forms).
torch.library.register_vmap("torch_dml_ops::gather_nd", _gather_nd_vmap, lib=lib)
torch.library.register_vmap("torch_dml_ops::gather_nd_backward", _gather_nd_backward_vmap, lib=lib)

_OP = torch.ops.torch_dml_ops.gather_nd.default
_OUT_OP = torch.ops.torch_dml_ops.gather_nd_out.default


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
            bfloat16, float64, int64, int32, int16, int8, uint8, uint16, uint32, bool (the
            DirectML levels allow float32, float16, int32, int16, int8, uint32, uint16, uint8).
            Any strides.
        indices: integer tuples, shape ``[*batch, ..., k]``, dtype int64, int32, uint64 or uint32.
            Negative values of a signed type count from the end of their dimension.
        batch_dims: leading dimensions shared by ``input`` and ``indices`` (DML_GATHER_ND1's
            BatchDimensionCount; from DML_FEATURE_LEVEL_3_0).
        input_dimension_count, indices_dimension_count: select the DML form.
        check_indices: verify that every index is in range and raise ``IndexError`` otherwise
            (naming the value and its position).  On the Triton path the check costs one host
            sync per call; ``False`` skips it, and an out-of-range tuple then yields zeros.  The
            portable path always checks: its check is one flat min/max pass that it needs
            anyway to know whether negative indices must wrap.  Either way no kernel ever reads
            or writes out of bounds.
        out: optional preallocated result (exact shape, dtype, device; must not overlap the
            inputs).  Not differentiable, like torch's ``out=`` functions.

    Feature levels: inside ``with torch_dml_ops.feature_level("2_1"):`` the DirectML tables of that
    level are enforced (see the README).

    Raises:
        ConstraintError (a ValueError): a shape, rank or feature-level rule is violated.
        ConstraintTypeError (a ConstraintError and a TypeError): an unsupported dtype.
        IndexError: an index is out of range (names its value and position).

    Gradient: w.r.t. ``input``; duplicate tuples accumulate.  Deterministic on CPU.

    Example:
        >>> x = torch.tensor([[0., 1.], [2., 3.]])
        >>> gather_nd(x, torch.tensor([[1], [0]]))
        tensor([[2., 3.],
                [0., 1.]])
    """
    level = _state.level
    batch_dims = as_int("gather_nd", "batch_dims", batch_dims)
    if out is None:
        if _backend.plain_eager_call((input, indices), (input,)):
            return _gather_nd_impl(input, indices, batch_dims, input_dimension_count,
                                   indices_dimension_count, level, check_indices)
        check_tensors("gather_nd", input, indices)      # before the dispatcher's own error
        return GATHER_ND.call(input, indices, batch_dims, input_dimension_count,
                              indices_dimension_count, level, check_indices)
    # An input or out that requires grad goes through the dispatcher, whose Autograd kernel
    # refuses it (_autograd.register_out), as torch's out= functions do.
    if _backend.plain_eager_call((input, indices, out), (input, out)):
        _gather_nd_out_impl(input, indices, batch_dims, input_dimension_count,
                            indices_dimension_count, level, check_indices, out=out)
    else:
        check_tensors("gather_nd", input, indices, out=out)
        _OUT_OP(input, indices, batch_dims, input_dimension_count, indices_dimension_count, level,
                check_indices, out=out)
    return out


# Docstrings for torch.ops.torch_dml_ops.* (help() on the dispatcher's objects).
document("gather_nd", """\
DML_OPERATOR_GATHER_ND / GATHER_ND1 (ONNX GatherND): the slices of ``input`` addressed by
the index tuples in ``indices``, after ``batch_dims`` shared leading dimensions.  The registered
op behind :func:`torch_dml_ops.gather_nd`, which documents every argument; ``feature_level`` is a
canonical level name ("permissive", "2_1", "3_0", "3_1") and ``check_indices`` range-checks
the indices.  Differentiable w.r.t. ``input`` (both modes, any order).""")
document("gather_nd_out", """\
:func:`torch_dml_ops.gather_nd` into a preallocated ``out`` (exact shape and dtype, no
overlap with the inputs, written only after every index is checked).  Not differentiable.""")
document("gather_nd_backward", """\
The gradient of gather_nd w.r.t. its input: ``grad`` scatter-added at the gathered
positions into zeros of ``input_shape`` (duplicates accumulate).  Linear; differentiable.""")
