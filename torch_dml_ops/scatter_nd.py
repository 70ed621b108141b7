"""scatter_nd: DML_OPERATOR_SCATTER_ND (= ONNX ScatterND, with ScatterND-18's reductions).

Layers, as for gather_nd:
  ``scatter_nd`` / ``scatter_nd_``    public functions (functional with ``out=``; in-place)
  ``torch_dml_ops::scatter_nd``       functional op: ``_scatter_nd_impl``, fake, autograd
  ``torch_dml_ops::scatter_nd_out``   writes a preallocated output
  ``torch_dml_ops::scatter_nd_``      in-place: mutates its ``input`` (``Tensor(a!)``)
  ``scatter_nd_torch``                portable path (``_fallback.py``)
  ``scatter_nd_triton``               Triton launchers (``triton_kernels/scatter_nd.py``)

Duplicate index tuples: with a reduction every duplicate is applied.  With none (invalid in
DirectML) the last tuple in index order wins and rows never mix two updates: on the portable path
for slices and in deterministic mode (element scatters outside it may keep any one duplicate), on
the Triton path always through a claim pass (element scatters outside deterministic mode store
directly: any one duplicate).  Under ``torch.use_deterministic_algorithms(True)`` the result is
exactly the last update in index order on every backend.
"""
from __future__ import annotations

from typing import Optional

import torch

from . import _backend, _native, _native_gather_scatter
from ._fallback import scatter_nd_torch
from ._forms import GatherLayout
from ._library import lib
from ._validation import SIGNED_INDEX_DTYPES, _state, check_out, check_scatter_nd, raise_index_error

__all__ = ["scatter_nd", "scatter_nd_"]

_TAIL = ("str reduction='none', int? input_dimension_count=None, "
         "int? indices_dimension_count=None, str feature_level='permissive', "
         "bool check_indices=True")
# Functional op: a copy of input with updates scattered in.
lib.define(f"scatter_nd(Tensor input, Tensor indices, Tensor updates, {_TAIL}) -> Tensor")
# out= variant (no autograd).
lib.define(f"scatter_nd_out(Tensor input, Tensor indices, Tensor updates, {_TAIL}, *, "
           f"Tensor(a!) out) -> ()")
# In-place variant: skips the copy (KV-cache updates); mutates input.
lib.define(f"scatter_nd_(Tensor(a!) input, Tensor indices, Tensor updates, {_TAIL}) -> ()")


def _scatter_into(dst: torch.Tensor, source: Optional[torch.Tensor], indices: torch.Tensor,
                  updates: torch.Tensor, lay: GatherLayout, reduction: str, check: bool,
                  fresh: bool = False, backend: Optional[str] = None) -> None:
    """Check the indices, copy ``source`` into ``dst`` (unless None), scatter: in that order, so
    a failing call writes nothing.  ``backend``: the caller's ``backend_for`` decision, if made."""
    if backend is None:
        backend = _backend.backend_for(dst)
    if backend == "native":
        if _native_gather_scatter.scatter_nd_native(dst, source, indices, updates, lay,
                                                    reduction):
            if not dst.is_inference():
                torch.autograd.graph.increment_version(dst)   # written through a pointer
            return
    deterministic = torch.are_deterministic_algorithms_enabled()
    if backend == "triton":
        from . import triton_kernels as tk
        if tk.scatter_nd_triton_supports(dst.dtype, reduction, deterministic):
            nat_indices = indices.reshape(lay.natural_indices_shape)
            if check:
                flag = tk.scatter_nd_check_triton(lay.index_sizes, nat_indices)
                pos = int(flag.item())   # the one host sync of a checked call
                if pos != 2**63 - 1:
                    raise_index_error("scatter_nd", indices, pos, indices.shape, lay.index_sizes,
                                      lay.dim_names(dst.dim()),
                                      indices.dtype in SIGNED_INDEX_DTYPES, lay.k)
            if source is not None:
                dst.copy_(source)
            tk.scatter_nd_triton(dst.reshape(lay.natural_input_shape), nat_indices,
                                 updates.reshape(lay.natural_out_shape), lay.k, reduction,
                                 deterministic)
            if not dst.is_inference():
                torch.autograd.graph.increment_version(dst)
            return
    # Portable path (also for the Triton backend's unsupported dtype/reduction pairs and the
    # native kernels' uncovered dtype/reduction pairs).
    scatter_nd_torch(dst, indices, updates, lay, reduction, source, fresh)


def _scatter_nd_impl(input, indices, updates, reduction="none", input_dimension_count=None,
                     indices_dimension_count=None, feature_level="permissive", check_indices=True):
    lay = check_scatter_nd(input, indices, updates, reduction, input_dimension_count,
                           indices_dimension_count, feature_level)
    backend = _backend.backend_for(input)
    if backend == "native" and _native_gather_scatter.scatter_covers(input.dtype, reduction):
        # The native kernel copies the input into the fresh output itself (each thread the rows
        # it then scatters into), after the index check.
        out = _native.empty_like(input)
        _scatter_into(out, input, indices, updates, lay, reduction, check_indices,
                      backend=backend)
        return out
    out = input.clone(memory_format=torch.contiguous_format)
    _scatter_into(out, None, indices, updates, lay, reduction, check_indices, fresh=True,
                  backend=backend)
    return out


def _scatter_nd_out_impl(input, indices, updates, reduction="none", input_dimension_count=None,
                         indices_dimension_count=None, feature_level="permissive",
                         check_indices=True, *, out):
    lay = check_scatter_nd(input, indices, updates, reduction, input_dimension_count,
                           indices_dimension_count, feature_level)
    check_out("scatter_nd", out, input.shape, input.dtype, input.device,
              (("InputTensor", input), ("IndicesTensor", indices), ("UpdatesTensor", updates)))
    _scatter_into(out, input, indices, updates, lay, reduction, check_indices)


def _scatter_nd_inplace_impl(input, indices, updates, reduction="none",
                             input_dimension_count=None, indices_dimension_count=None,
                             feature_level="permissive", check_indices=True):
    lay = check_scatter_nd(input, indices, updates, reduction, input_dimension_count,
                           indices_dimension_count, feature_level)
    check_out("scatter_nd_", input, input.shape, input.dtype, input.device,
              (("IndicesTensor", indices), ("UpdatesTensor", updates)))
    _scatter_into(input, None, indices, updates, lay, reduction, check_indices)


def _scatter_nd_fake(input, indices, updates, reduction="none", input_dimension_count=None,
                     indices_dimension_count=None, feature_level="permissive", check_indices=True):
    check_scatter_nd(input, indices, updates, reduction, input_dimension_count,
                     indices_dimension_count, feature_level)
    return input.new_empty(input.shape)


def _scatter_nd_out_fake(input, indices, updates, reduction="none", input_dimension_count=None,
                         indices_dimension_count=None, feature_level="permissive",
                         check_indices=True, *, out):
    check_scatter_nd(input, indices, updates, reduction, input_dimension_count,
                     indices_dimension_count, feature_level)
    if tuple(out.shape) != tuple(input.shape) or out.dtype != input.dtype:
        raise ValueError(f"scatter_nd: OutputTensor (out) must have shape {tuple(input.shape)} "
                         f"and dtype {input.dtype}, got {tuple(out.shape)} and {out.dtype}")


def _scatter_nd_inplace_fake(input, indices, updates, reduction="none",
                             input_dimension_count=None, indices_dimension_count=None,
                             feature_level="permissive", check_indices=True):
    check_scatter_nd(input, indices, updates, reduction, input_dimension_count,
                     indices_dimension_count, feature_level)


# ---------------------------------------------------------------------------------------------
# Autograd of the functional op
# ---------------------------------------------------------------------------------------------

def _scatter_nd_setup_context(ctx, inputs, output):
    input, indices, updates, reduction, idc_in, idc_idx = inputs[:6]
    ctx.save_for_backward(indices)
    ctx.reduction = reduction
    ctx.updates_shape = tuple(updates.shape)
    ctx.counts = (idc_in, idc_idx)


def _scatter_nd_backward(ctx, grad):
    """none: grad_input = grad with the overwritten positions zeroed, grad_updates = grad
    gathered at the indices.  add: grad_input = grad, grad_updates = gathered grad.  Both are
    built from the registered ops, so they are differentiable again (double backward)."""
    (indices,) = ctx.saved_tensors
    red = ctx.reduction
    need_input, need_updates = ctx.needs_input_grad[0], ctx.needs_input_grad[2]
    if red not in ("none", "add") and (need_input or need_updates):
        raise RuntimeError(
            f"scatter_nd: the gradient of reduction={red!r} is not implemented (it is not "
            f"differentiable where duplicates tie or an update is zero); only reduction='none' "
            f"and 'add' are differentiable"
        )
    idc_in, idc_idx = ctx.counts
    grad_input = grad_updates = None
    if need_input:
        if red == "add":
            grad_input = grad
        else:
            grad_input = torch.ops.torch_dml_ops.scatter_nd(
                grad, indices, grad.new_zeros(ctx.updates_shape), "none", idc_in, idc_idx,
                "permissive", False)
    if need_updates:
        grad_updates = torch.ops.torch_dml_ops.gather_nd(grad, indices, 0, idc_in, idc_idx,
                                                         "permissive", False)
    return grad_input, None, grad_updates, None, None, None, None, None


def _scatter_nd_inplace_autograd(input, indices, updates, *args):
    """Autograd key of the in-place op: refuse tensors that require grad, as torch's in-place
    ops refuse a leaf; otherwise run below autograd."""
    _refuse_grad_in_place(input, updates)
    with torch._C._AutoDispatchBelowAutograd():
        return torch.ops.torch_dml_ops.scatter_nd_.default(input, indices, updates, *args)


def _refuse_grad_in_place(input, updates):
    if torch.is_grad_enabled() and (input.requires_grad or updates.requires_grad):
        which = "input" if input.requires_grad else "updates"
        leaf = " (a leaf Variable that requires grad)" if which == "input" and input.is_leaf else ""
        raise RuntimeError(
            f"scatter_nd_(): {which}{leaf} requires grad, but the in-place scatter is not "
            f"differentiable; use the functional torch_dml_ops.scatter_nd, or wrap the call in "
            f"torch.no_grad()"
        )


# One kernel for every device; it picks Triton or the portable path per call.
lib.impl("scatter_nd", _scatter_nd_impl, "CompositeExplicitAutograd")
lib.impl("scatter_nd_out", _scatter_nd_out_impl, "CompositeExplicitAutograd")
lib.impl("scatter_nd_", _scatter_nd_inplace_impl, "CompositeExplicitAutograd")
lib.impl("scatter_nd_", _scatter_nd_inplace_autograd, "Autograd")
# Shapes without data: FakeTensor, meta, torch.compile, torch.export.
torch.library.register_fake("torch_dml_ops::scatter_nd", _scatter_nd_fake, lib=lib)
torch.library.register_fake("torch_dml_ops::scatter_nd_out", _scatter_nd_out_fake, lib=lib)
torch.library.register_fake("torch_dml_ops::scatter_nd_", _scatter_nd_inplace_fake, lib=lib)
# Gradients w.r.t. input and updates (first and second order).
torch.library.register_autograd("torch_dml_ops::scatter_nd", _scatter_nd_backward,
                                setup_context=_scatter_nd_setup_context, lib=lib)


def _scatter_nd_vmap(info, in_dims, input, indices, updates, reduction="none",
                     input_dimension_count=None, indices_dimension_count=None,
                     feature_level="permissive", check_indices=True):
    """torch.vmap: the vmapped dimension becomes one more leading coordinate of every tuple."""
    if input_dimension_count is not None or indices_dimension_count is not None:
        raise ValueError("scatter_nd: torch.vmap supports the natural form only (a vmapped "
                         "dimension has no place in the DML form's padding)")
    check_scatter_nd(_backend.logical(input, in_dims[0]), _backend.logical(indices, in_dims[1]),
                     _backend.logical(updates, in_dims[2]), reduction, None, None, feature_level)
    x, i, u = _backend.vmap_operands(info, in_dims[:3], (input, indices, updates))
    b = info.batch_size
    coord = torch.arange(b, device=i.device).to(i.dtype)
    coord = coord.view((b,) + (1,) * (i.dim() - 1)).expand(tuple(i.shape[:-1]) + (1,))
    out = _OP(x, torch.cat([coord, i], dim=-1), u, reduction, None, None, "permissive",
              check_indices)
    return out, 0


# torch.vmap without the per-sample fallback loop (natural form, functional op).
torch.library.register_vmap("torch_dml_ops::scatter_nd", _scatter_nd_vmap, lib=lib)

_OP = torch.ops.torch_dml_ops.scatter_nd.default
_OUT_OP = torch.ops.torch_dml_ops.scatter_nd_out.default
_INPLACE_OP = torch.ops.torch_dml_ops.scatter_nd_.default


def scatter_nd(input: torch.Tensor, indices: torch.Tensor, updates: torch.Tensor,
               reduction: str = "none", *, input_dimension_count: Optional[int] = None,
               indices_dimension_count: Optional[int] = None, check_indices: bool = True,
               out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """A copy of ``input`` with ``updates`` scattered at the index tuples of ``indices``.

    ``out = input.clone(); out[*indices[i..., :], ...] = updates[i..., ...]`` (``reduction``
    ``"none"``, DML_SCATTER_ND), or combined with what is there: ``"add"``, ``"mul"``, ``"max"``,
    ``"min"`` (ONNX ScatterND-18; every duplicate tuple is applied).  The input is never modified.

    Natural form: ``updates.shape == indices.shape[:-1] + input.shape[k:]``.  DML form
    (``input_dimension_count`` and ``indices_dimension_count``): the three tensors have the same
    DimensionCount, padded with leading 1s, and ``updates`` has that shape right-aligned.

    Args:
        input: data (dtypes as for :func:`gather_nd`); any strides.
        indices: ``[..., k]`` int64, int32, uint64 or uint32; negative values of a signed type
            count from the end.
        updates: the input's dtype, shape as above.
        reduction: ``"none"`` (default), ``"add"``, ``"mul"``, ``"max"``, ``"min"``.  On bool
            data add/max are logical or, mul/min logical and.  DirectML levels allow "none" only.
        check_indices: range-check every index (``IndexError`` naming value and position).  The
            portable path always checks; on the Triton path ``False`` removes a host sync and
            out-of-range tuples are skipped.  No kernel ever writes out of bounds.
        out: optional preallocated result (input's shape, dtype, device; no overlap).

    Duplicate tuples with ``reduction="none"`` (invalid in DirectML): each slot holds one of
    the duplicates' updates, never a mix; under ``torch.use_deterministic_algorithms(True)``
    exactly the last one in index order, on every backend.

    Gradients: for "none", grad_input is the output gradient with the overwritten positions
    zeroed and grad_updates the gradient gathered at the indices; for "add", grad_input is the
    gradient and grad_updates the gathered gradient.  "mul", "max", "min" raise in backward.

    Example:
        >>> scatter_nd(torch.tensor([1., 2, 3, 4, 5, 6, 7, 8]), torch.tensor([[4], [3], [1], [7]]),
        ...            torch.tensor([9., 10, 11, 12]))
        tensor([ 1., 11.,  3., 10.,  9.,  6.,  7., 12.])
    """
    level = _state.level
    if out is None:
        if _backend.plain_eager_call((input, indices, updates), (input, updates)):
            return _scatter_nd_impl(input, indices, updates, reduction, input_dimension_count,
                                    indices_dimension_count, level, check_indices)
        return _OP(input, indices, updates, reduction, input_dimension_count,
                   indices_dimension_count, level, check_indices)
    if torch.is_grad_enabled() and (input.requires_grad or updates.requires_grad):
        raise RuntimeError(
            "scatter_nd(): functions with out=... arguments don't support automatic "
            "differentiation, but one of the arguments requires grad."
        )
    if _backend.plain_eager_call((input, indices, updates, out), ()):
        _scatter_nd_out_impl(input, indices, updates, reduction, input_dimension_count,
                             indices_dimension_count, level, check_indices, out=out)
    else:
        _OUT_OP(input, indices, updates, reduction, input_dimension_count,
                indices_dimension_count, level, check_indices, out=out)
    return out


def scatter_nd_(input: torch.Tensor, indices: torch.Tensor, updates: torch.Tensor,
                reduction: str = "none", *, input_dimension_count: Optional[int] = None,
                indices_dimension_count: Optional[int] = None,
                check_indices: bool = True) -> torch.Tensor:
    """In-place :func:`scatter_nd`: writes ``updates`` into ``input`` itself and returns it.

    Skips the copy of the input (KV-cache updates).  Refuses tensors that require grad (use the
    functional form).  A failing call (bad index, shape, dtype) leaves ``input`` unmodified.
    """
    level = _state.level
    _refuse_grad_in_place(input, updates)
    if _backend.plain_eager_call((input, indices, updates), ()):
        _scatter_nd_inplace_impl(input, indices, updates, reduction, input_dimension_count,
                                 indices_dimension_count, level, check_indices)
    else:
        _INPLACE_OP(input, indices, updates, reduction, input_dimension_count,
                    indices_dimension_count, level, check_indices)
    return input
