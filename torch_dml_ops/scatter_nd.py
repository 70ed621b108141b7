"""scatter_nd: DML_OPERATOR_SCATTER_ND (= ONNX ScatterND, with ScatterND-18's reductions).

This module is the op's front: the public functions (``scatter_nd`` with ``out=``, in-place
``scatter_nd_``), the fake kernels, autograd and the vmap rule.  The ops: ``scatter_nd``
(functional), ``scatter_nd_out`` (a preallocated output), ``scatter_nd_`` (mutates its
``input``, ``Tensor(a!)``).  Their kernels, one module per backend:
  ``csrc/scatter_nd.cpp``            C++ CPU kernels
  ``triton_kernels/scatter_nd.py``   Triton (CUDA)
  ``portable/scatter_nd.py``         torch ops (every other device; the reference)

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


from . import _autograd, _backend, _compat, _subclass
from ._checks import (check_bool, check_level, check_out, check_out_meta, check_scatter_nd,
                      check_tensors, raise_documented)
from ._forms import GatherLayout, gather_layout
from ._inductor_fixes import lower_storage_offset
from ._levels import PERMISSIVE, _state
from ._types import Reduction
from ._library import document, lib
from .gather_nd import GATHER_ND, tuples_in_range

__all__ = ["scatter_nd", "scatter_nd_"]


def _scatter_nd_fake(input, indices, updates, reduction="none", input_dimension_count=None,
                     indices_dimension_count=None, feature_level="permissive", check_indices=True,
                     deterministic=False):
    check_scatter_nd(input, indices, updates, reduction, input_dimension_count,
                     indices_dimension_count, feature_level, check_indices, deterministic)
    return input.new_empty(input.shape)


def _scatter_nd_out_fake(input, indices, updates, reduction="none", input_dimension_count=None,
                         indices_dimension_count=None, feature_level="permissive",
                         check_indices=True, deterministic=False, *, out):
    lower_storage_offset()      # out may be a view: see _inductor_fixes
    check_scatter_nd(input, indices, updates, reduction, input_dimension_count,
                     indices_dimension_count, feature_level, check_indices, deterministic)
    check_out_meta("scatter_nd", out, input.shape, input.dtype, input.device)


def _scatter_nd_inplace_fake(input, indices, updates, reduction="none",
                             input_dimension_count=None, indices_dimension_count=None,
                             feature_level="permissive", check_indices=True, deterministic=False):
    lower_storage_offset()      # input may be a view (a KV-cache layer): see _inductor_fixes
    check_scatter_nd(input, indices, updates, reduction, input_dimension_count,
                     indices_dimension_count, feature_level, check_indices, deterministic,
                     op="scatter_nd_")


# ---------------------------------------------------------------------------------------------
# Autograd (reverse and forward mode, torch.func; _autograd.py says why not register_autograd)
# ---------------------------------------------------------------------------------------------

def _last_wins(args: tuple) -> tuple:
    """A recorded "none" scatter runs deterministically (the last duplicate in index order wins),
    so that its gradient can follow the winner; the flag is an op argument, so compiled and
    exported graphs keep it."""
    if args[3] == "none" and not args[8]:
        args = tuple(args[:8]) + (True,) + tuple(args[9:])
    return args


def _winners(indices: torch.Tensor, lay: GatherLayout) -> torch.Tensor:
    """Bool, ``indices.shape[:-1]`` (natural form): whether each tuple is the last one in index
    order to address its slice, i.e. the one whose update a deterministic "none" scatter keeps.

    Built from the registered ops (a max-scatter of tuple positions, gathered back), so it runs on
    every backend and under vmap.  The positions and the scatter's target are made from
    ``indices`` (``new_*``), not by factory functions: a tensor subclass such as DTensor then gets
    one of its own kind (a plain tensor among DTensors is refused by their dispatch)."""
    nat = indices.reshape(lay.natural_indices_shape)
    pos = (indices.new_ones(lay.n_tuples, dtype=torch.int64).cumsum(0) - 1).reshape(
        nat.shape[:-1])
    if lay.k == 0:      # every tuple addresses the whole input: the last one wins
        return pos == lay.n_tuples - 1
    last = indices.new_full(lay.index_sizes, -1, dtype=torch.int64)
    last = SCATTER_ND.call(last, nat, pos, "max", None, None, "permissive", False, False)
    return GATHER_ND.call(last, nat, 0, None, None, "permissive", False) == pos


def _layout(ctx, indices):
    return gather_layout("scatter_nd", ctx.input_shape, indices.shape, 0, *ctx.counts,
                         updates_name="UpdatesTensor", min_tuple_size=0)


_COMBINING = ("mul", "max", "min")


def _scatter_nd_setup_context(ctx, inputs, output, previous=None):
    """``previous``: the in-place target's values before the write (mul/max/min need them)."""
    input, indices, updates, reduction, idc_in, idc_idx = inputs[:6]
    if reduction in _COMBINING:
        saved = (indices, input if previous is None else previous, updates, output)
    else:
        saved = (indices,)
    ctx.save_for_backward(*saved)
    _autograd.save_for_jvp(ctx, *saved)
    ctx.reduction = reduction
    ctx.check = inputs[7]          # False: out-of-range tuples were skipped
    ctx.deterministic = inputs[8]
    ctx.input_shape = tuple(input.shape)
    ctx.updates_shape = tuple(updates.shape)
    ctx.counts = (idc_in, idc_idx)


def _gather_at(ctx, t, indices):
    """``t`` (input-shaped) at every tuple's slice: updates-shaped.  Index tuples of size 0
    (which gather_nd refuses, as ONNX GatherND does) each take the whole of ``t``."""
    if indices.shape[-1] == 0:
        lay = _layout(ctx, indices)
        whole = t.reshape(lay.natural_input_shape)
        return whole.expand(tuple(lay.natural_indices_shape[:-1]) + tuple(whole.shape)).reshape(
            ctx.updates_shape)
    return GATHER_ND.call(t, indices, 0, *ctx.counts, "permissive", False)


def _add_at(ctx, base, indices, values):
    """``base`` plus ``values`` (updates-shaped) summed into the tuples' slices."""
    return SCATTER_ND.call(base, indices, values, "add", *ctx.counts, "permissive", False,
                           False)


def _only_applied(ctx, indices, grad_updates):
    """``check_indices=False``: zero gradient for the updates of the tuples the forward skipped
    (out of range), whatever the factors say there (max/min divide by a tie count of 0)."""
    if ctx.check:
        return grad_updates
    lay = _layout(ctx, indices)
    ok = tuples_in_range(indices, lay.index_sizes).reshape(
        tuple(lay.natural_indices_shape[:-1]) + (1,) * len(lay.slice_shape))
    return torch.where(ok, grad_updates.reshape(lay.natural_out_shape), 0).reshape(
        ctx.updates_shape)


def _combining_factors(ctx):
    """(fx, fu): the partial derivatives of a mul/max/min scatter, input- and updates-shaped,
    so that ``d out = fx * d input + add_at(fu * d updates)`` (forward mode; the backward is
    ``_combining_grads``).

    Every slot ``r`` combines its input value with the updates of every tuple addressing it.
    max/min (torch's amax/amin convention): the derivative is shared evenly by every value
    equal to the result.  mul: the product of the others; with one zero, only that zero's
    derivative is nonzero; with two or more, none is.  Built from the registered ops and torch
    ops, so differentiable again."""
    indices, x, u, out = ctx.saved_tensors
    if ctx.reduction in ("max", "min"):
        eq_x = (x == out).to(out.dtype)
        eq_u = (u == _gather_at(ctx, out, indices)).to(out.dtype)
        count = _add_at(ctx, eq_x, indices, eq_u)
        return eq_x / count, eq_u / _gather_at(ctx, count, indices)
    zx, zu = x == 0, u == 0
    x1, u1 = torch.where(zx, torch.ones_like(x), x), torch.where(zu, torch.ones_like(u), u)
    zeros = _add_at(ctx, zx.to(out.dtype), indices, zu.to(out.dtype))       # per slot
    nonzero_product = SCATTER_ND.call(x1, indices, u1, "mul", *ctx.counts, "permissive", False,
                                      False)
    zeros_u, product_u = _gather_at(ctx, zeros, indices), _gather_at(ctx, nonzero_product,
                                                                     indices)
    fx = torch.where(zeros == 0, nonzero_product / x1,
                     torch.where(zx & (zeros == 1), nonzero_product, torch.zeros_like(x)))
    fu = torch.where(zeros_u == 0, product_u / u1,
                     torch.where(zu & (zeros_u == 1), product_u, torch.zeros_like(u)))
    return fx, fu


def _combining_grads(ctx, grad, need_input: bool, need_updates: bool):
    """(grad_input, grad_updates) of a mul/max/min scatter: torch's ``scatter_reduce(...,
    include_self=True)`` gradients, the same operations in the same order, so bit for bit
    theirs (a slot's updates are its scatter_reduce index's ``src``).  max/min: the gradient
    divided by the number of values equal to the result, to each of them.  mul: ``grad *
    product / factor`` for the input; for an update, ``gather(grad * product) / update``, or,
    where it is the slot's one zero update, ``gather(grad * the product without it)``.  Built
    from the registered ops and torch ops, so differentiable again (where torch's refuses a
    double backward through two zero updates in a slot, this one gives zeros)."""
    indices, x, u, out = ctx.saved_tensors
    gx = gu = None
    if ctx.reduction in ("max", "min"):
        x_is, u_is = x == out, u == _gather_at(ctx, out, indices)
        shared = grad / _add_at(ctx, x_is.to(out.dtype), indices, u_is.to(out.dtype))
        if need_input:
            gx = x_is * shared
        if need_updates:
            gu = u_is * _gather_at(ctx, shared, indices)
        return gx, gu
    if need_input:
        x1 = x.masked_fill(x == 0, 1)
        gx = grad * SCATTER_ND.call(x1, indices, u, "mul", *ctx.counts, "permissive", False,
                                    False) / x1
    if need_updates:
        u_zero = u == 0
        zeros = _gather_at(ctx, _add_at(ctx, torch.zeros_like(x), indices, u_zero.to(x.dtype)),
                           indices)
        single = u_zero & (zeros == 1)
        without = SCATTER_ND.call(x, indices, u.masked_fill(single, 1), "mul", *ctx.counts,
                                  "permissive", False, False)
        gu = torch.where(single, _gather_at(ctx, grad * without, indices),
                         _gather_at(ctx, grad * out, indices) / u.masked_fill(u_zero, 1))
    return gx, gu


def _scatter_nd_backward(ctx, grad):
    """none: grad_input = grad with the overwritten positions zeroed, grad_updates = grad
    gathered at the indices for the winning duplicate of each slice and zero for the others (the
    forward ran deterministically: ``_last_wins``).  add: grad_input = grad, grad_updates = the
    gathered grad for every tuple.  mul/max/min: ``_combining_grads``.  Built from the
    registered ops, so differentiable again."""
    indices = ctx.saved_tensors[0]
    red = ctx.reduction
    need_input, need_updates = ctx.needs_input_grad[0], ctx.needs_input_grad[2]
    idc_in, idc_idx = ctx.counts
    grad_input = grad_updates = None
    if red in _COMBINING:
        grad_input, grad_updates = _combining_grads(ctx, grad, need_input, need_updates)
        if grad_updates is not None:
            grad_updates = _only_applied(ctx, indices, grad_updates)
        return grad_input, None, grad_updates, None, None, None, None, None, None
    if need_input:
        if red == "add":
            grad_input = grad
        else:
            grad_input = SCATTER_ND.call(grad, indices, grad.new_zeros(ctx.updates_shape),
                                         "none", idc_in, idc_idx, "permissive", False, True)
    if need_updates:
        grad_updates = _gather_at(ctx, grad, indices)
        if red == "none":
            lay = _layout(ctx, indices)
            win = _winners(indices, lay).reshape(
                tuple(lay.natural_indices_shape[:-1]) + (1,) * len(lay.slice_shape))
            grad_updates = (grad_updates.reshape(lay.natural_out_shape) * win).reshape(
                ctx.updates_shape)
    return grad_input, None, grad_updates, None, None, None, None, None, None


def _scatter_nd_jvp(ctx, input_t, _i, updates_t, *_):
    """none/add: scatter the tangents the same way (linear).  mul/max/min: the tangents
    weighted by ``_combining_factors``."""
    indices = ctx.saved_tensors[0]
    red = ctx.reduction
    if input_t is None and updates_t is None:
        return None
    ref = input_t if input_t is not None else updates_t
    if input_t is None:
        input_t = ref.new_zeros(ctx.input_shape)
    if updates_t is None:
        updates_t = ref.new_zeros(ctx.updates_shape)
    if red in _COMBINING:
        fx, fu = _combining_factors(ctx)
        return _add_at(ctx, input_t * fx, indices, updates_t * fu)
    return SCATTER_ND.call(input_t, indices, updates_t, red, *ctx.counts, "permissive", False,
                           ctx.deterministic)


class _ScatterNDInplace(torch.autograd.Function):
    """scatter_nd_ recorded for autograd, as torch records index_copy_ / index_put_: the target
    is marked dirty; its previous values get the gradient with the overwritten positions zeroed
    ("none") or the whole gradient ("add"), the updates the gathered gradient (the winning
    duplicate's, for "none")."""

    @staticmethod
    def forward(ctx, input, indices, updates, *rest):
        previous = input.clone() if rest[0] in _COMBINING else None
        with _compat.below_autograd_guard():
            _INPLACE_OP(input, indices, updates, *rest)
        ctx.mark_dirty(input)
        _scatter_nd_setup_context(ctx, (input, indices, updates) + rest, input, previous)
        return input

    backward = staticmethod(_scatter_nd_backward)


def _scatter_nd_inplace_autograd(input, indices, updates, *args, **kwargs):
    """Autograd key of the in-place op: record it when the target or the updates require grad
    (a leaf that requires grad is refused, as by torch's in-place ops); otherwise run below
    autograd."""
    if len(args) > _INPLACE_LEVELS.at - 3 or kwargs:       # a level may be given
        _INPLACE_LEVELS((input, indices, updates) + args, kwargs)
    if _autograd.derivative_needed((input, updates)):
        _check_in_place_grad(input, updates)
        args = _INPLACE_FILL((input, indices, updates) + args, kwargs)
        _ScatterNDInplace.apply(*_last_wins(args))
        return None
    return _autograd.below_autograd(_INPLACE_OP, _INPLACE_REDISPATCH, (input, indices, updates),
                                    (input, indices, updates) + args, kwargs)


def _check_in_place_grad(input, updates, transforms: bool = True) -> None:
    """Refuse what the recorded in-place write cannot do: forward-mode AD, torch.func
    transforms (``transforms=False``: the vmap rule, running under its own transform), a leaf
    target that requires grad."""
    if _autograd.forward_ad_active() or (
            transforms and _compat.functorch_active()):
        raise RuntimeError(
            "scatter_nd_: forward-mode AD and torch.func transforms are not supported through "
            "the in-place scatter; use the functional torch_dml_ops.scatter_nd")
    if torch.is_grad_enabled() and input.requires_grad:
        base = input._base if input._is_view() else None
        if input.is_leaf or (base is not None and base.is_leaf and base.requires_grad):
            what = "a leaf Variable" if input.is_leaf else "a view of a leaf Variable"
            raise RuntimeError(
                f"scatter_nd_: InputTensor is {what} that requires grad, which is being used in "
                f"an in-place operation; clone it first, or use the functional "
                f"torch_dml_ops.scatter_nd")


# Shapes without data: FakeTensor, meta, torch.compile, torch.export.
torch.library.register_fake("torch_dml_ops::scatter_nd", _scatter_nd_fake, lib=lib)
torch.library.register_fake("torch_dml_ops::scatter_nd_out", _scatter_nd_out_fake, lib=lib)
torch.library.register_fake("torch_dml_ops::scatter_nd_", _scatter_nd_inplace_fake, lib=lib)
# Gradients w.r.t. input and updates, both modes, any order.
SCATTER_ND = _autograd.Differentiable("scatter_nd", _autograd.make_function(
    "ScatterND", torch.ops.torch_dml_ops.scatter_nd.default, _scatter_nd_setup_context,
    _scatter_nd_backward, _scatter_nd_jvp, n_tensors=3), prepare=_last_wins,
    n_tensors=3, check=check_scatter_nd)
SCATTER_ND_OUT = _autograd.OutOverload("scatter_nd_out", "scatter_nd", n_tensors=3,
                                       check=check_scatter_nd)
_INPLACE_OP = torch.ops.torch_dml_ops.scatter_nd_.default
_INPLACE_REDISPATCH = _compat.redispatcher(_INPLACE_OP)
_INPLACE_FILL = _autograd.defaults_filler(_INPLACE_OP._schema)
_INPLACE_LEVELS = _autograd.LevelRules(
    _INPLACE_OP._schema, lambda *args: _check_call(*args, op="scatter_nd_"))
lib.impl("scatter_nd_", _scatter_nd_inplace_autograd, "Autograd")


def _batched_call(info, in_dims, input, indices, updates, reduction, input_dimension_count,
                  indices_dimension_count, feature_level, check_indices, deterministic, op):
    """The operands of one call that does every sample's scatter: the vmapped dimension becomes
    one more leading coordinate of every tuple (a DML-form call is checked as written, then run
    in its natural form).  Returns ``(x, args)``: ``x`` is the physical input with the batch
    first, a view of it (the in-place rule writes through it), ``args`` the op's arguments."""
    lay = check_scatter_nd(_backend.logical(input, in_dims[0]),
                           _backend.logical(indices, in_dims[1]),
                           _backend.logical(updates, in_dims[2]), reduction,
                           input_dimension_count, indices_dimension_count, feature_level,
                           check_indices, deterministic, op)
    x, i, u = _backend.vmap_operands(info, in_dims[:3], (input, indices, updates))
    b = info.batch_size
    if lay.dml_form:
        # The padding dims (size 1) are indexed away: still a view of the input.
        x = x[(slice(None),) + (0,) * (x.dim() - 1 - len(lay.natural_input_shape))]
        i = i.reshape((b,) + tuple(lay.natural_indices_shape))
        u = u.reshape((b,) + tuple(lay.natural_out_shape))
    coord = torch.arange(b, device=i.device).to(i.dtype)
    coord = coord.view((b,) + (1,) * (i.dim() - 1)).expand(tuple(i.shape[:-1]) + (1,))
    return x, (x, torch.cat([coord, i], dim=-1), u, reduction, None, None, "permissive",
               check_indices, deterministic)


def _scatter_nd_vmap(info, in_dims, input, indices, updates, reduction="none",
                     input_dimension_count=None, indices_dimension_count=None,
                     feature_level="permissive", check_indices=True, deterministic=False):
    """torch.vmap: one scatter with the vmapped dimension as a leading coordinate
    (``_batched_call``), padded back in the DML form."""
    x, args = _batched_call(info, in_dims, input, indices, updates, reduction,
                            input_dimension_count, indices_dimension_count, feature_level,
                            check_indices, deterministic, "scatter_nd")
    padded = (info.batch_size,) + tuple(_backend.logical(input, in_dims[0]).shape)
    return _OP(*args).reshape(padded), 0


def _scatter_nd_inplace_vmap(info, in_dims, input, indices, updates, reduction="none",
                             input_dimension_count=None, indices_dimension_count=None,
                             feature_level="permissive", check_indices=True,
                             deterministic=False):
    """torch.vmap of the in-place op: one in-place scatter into the vmapped target (a view of
    it with the batch first), as torch's per-sample loop for ``index_copy_`` would write.  The
    target must be vmapped when anything else is (else every sample would write into the same
    tensor; torch refuses that for its in-place ops).  When autograd records the physical
    tensors (autograd outside vmap), the write is the functional op copied into the target, a
    write autograd records (``copy_``) through the functional op's derivatives."""
    if in_dims[0] is None:
        batched = ", ".join(name for name, d in zip(("IndicesTensor", "UpdatesTensor"),
                                                     in_dims[1:3]) if d is not None)
        raise RuntimeError(
            f"scatter_nd_: under torch.vmap, InputTensor (the in-place target) is not vmapped "
            f"while {batched} are (in_dims {tuple(in_dims[:3])}): every sample would write into "
            f"the same tensor; vmap the target too, or use the functional "
            f"torch_dml_ops.scatter_nd")
    x, args = _batched_call(info, in_dims, input, indices, updates, reduction,
                            input_dimension_count, indices_dimension_count, feature_level,
                            check_indices, deterministic, "scatter_nd_")
    if _autograd.forward_ad_active() or (
            torch.is_grad_enabled() and (input.requires_grad or updates.requires_grad)):
        _check_in_place_grad(input, updates, transforms=False)
        if reduction in _COMBINING:     # the functional op's backward reads its input
            args = (x.clone(),) + args[1:]
        x.copy_(_OP(*args))
    else:
        _autograd.below_autograd(_INPLACE_OP, _INPLACE_REDISPATCH, args[:3], args, {})
    return None, None


# torch.vmap without the per-sample fallback loop (both forms, functional and in place; the
# out= overloads have none, as torch's own out= ops: the fallback refuses them).
torch.library.register_vmap("torch_dml_ops::scatter_nd", _scatter_nd_vmap, lib=lib)
torch.library.register_vmap("torch_dml_ops::scatter_nd_", _scatter_nd_inplace_vmap, lib=lib)

_OP = torch.ops.torch_dml_ops.scatter_nd.default


def scatter_nd(input: torch.Tensor, indices: torch.Tensor, updates: torch.Tensor,
               reduction: Reduction = "none", *, input_dimension_count: Optional[int] = None,
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
            count from the end.  ``0 <= k <= input.dim()`` (ONNX ScatterND): with ``k == 0``
            every update has the input's whole shape and covers all of it (in index order,
            as duplicates are applied).
        updates: the input's dtype, shape as above.
        reduction: ``"none"`` (default), ``"add"``, ``"mul"``, ``"max"``, ``"min"``.  On bool
            data add/max are logical or, mul/min logical and.  DirectML levels allow "none" only.
        check_indices: ``True``: an out-of-range index raises ``IndexError`` (naming value and
            position) before anything is written.  ``False``: a tuple with an out-of-range
            coordinate is skipped, on every backend: the result is that of the same call
            without it (its update gets a zero gradient).  ``False`` saves the Triton path's
            host sync; the CPU backends check every index either way.  No backend ever reads
            or writes out of bounds, whatever the flag.
        out: optional preallocated result (input's shape, dtype, device; no overlap).

    Duplicate tuples with ``reduction="none"`` (invalid in DirectML): each slot holds one of
    the duplicates' updates, never a mix; exactly the last one in index order, on every backend,
    under ``torch.use_deterministic_algorithms(True)`` and whenever the call is recorded for
    autograd (the updates or the input require grad).

    Gradients (reverse and forward mode, torch.func): for "none", grad_input is the output
    gradient with the overwritten positions zeroed and grad_updates the gradient gathered at the
    indices for the winning (last) duplicate of each slice, zero for the overwritten ones; for
    "add", grad_input is the gradient and grad_updates the gathered gradient for every tuple;
    "mul", "max", "min" as torch's ``scatter_reduce(..., include_self=True)`` (ties share the
    gradient evenly; a product's factors get the product of the others).

    Example:
        >>> scatter_nd(torch.tensor([1., 2, 3, 4, 5, 6, 7, 8]), torch.tensor([[4], [3], [1], [7]]),
        ...            torch.tensor([9., 10, 11, 12]))
        tensor([ 1., 11.,  3., 10.,  9.,  6.,  7., 12.])
    """
    if type(input) is not torch.Tensor:
        # a subclass: a DTensor's out=, or one sharded on an indexed dim (_subclass)
        routed = _subclass.route("scatter_nd", input, indices, updates, reduction,
                                 input_dimension_count, indices_dimension_count, check_indices,
                                 out)
        if routed is not None:
            return routed
    level = _state.level
    if type(check_indices) is not bool:     # the dispatcher would take an int for a bool
        check_bool("scatter_nd", "check_indices", check_indices)
    args = (input, indices, updates, reduction, input_dimension_count, indices_dimension_count,
            level, check_indices, False)
    if level != PERMISSIVE:
        check_level(lambda: _check_call(*args, out=out))
    try:
        if out is None:
            return SCATTER_ND.call_public(*args)
        check_tensors("scatter_nd", input, indices, updates, out=out)
        SCATTER_ND_OUT.call((input, indices, updates, out), *args, out=out)
        return out
    except Exception:
        # The documented exception for a refused call, with the kernel's message (see gather_nd).
        raise_documented(lambda: _check_call(*args, out=out))
        raise


def _check_call(input, indices, updates, reduction, input_dimension_count,
                indices_dimension_count, level, check_indices, deterministic, *, out=None,
                op="scatter_nd") -> None:
    """The Python checks of a public call (raise_documented runs them); op "scatter_nd_": the
    in-place call, whose target is ``input``."""
    check_scatter_nd(input, indices, updates, reduction, input_dimension_count,
                     indices_dimension_count, level, check_indices, deterministic, op=op)
    if op == "scatter_nd_":
        check_out(op, input, input.shape, input.dtype, input.device,
                  (("IndicesTensor", indices), ("UpdatesTensor", updates)),
                  name="InputTensor (the in-place target)")
    elif out is not None:
        check_out(op, out, input.shape, input.dtype, input.device,
                  (("InputTensor", input), ("IndicesTensor", indices), ("UpdatesTensor", updates)))


def scatter_nd_(input: torch.Tensor, indices: torch.Tensor, updates: torch.Tensor,
                reduction: Reduction = "none", *, input_dimension_count: Optional[int] = None,
                indices_dimension_count: Optional[int] = None,
                check_indices: bool = True) -> torch.Tensor:
    """In-place :func:`scatter_nd`: writes ``updates`` into ``input`` itself and returns it.

    Skips the copy of the input (KV-cache updates).  Recorded for autograd like torch's
    ``index_copy_``: the gradient reaches the updates (the winning duplicate's, for "none") and
    the target's previous values (zero at the overwritten positions, for "none"); a leaf that
    requires grad is refused, as by every in-place op.  A failing call (bad index, shape, dtype)
    leaves ``input`` unmodified.
    """
    if type(input) is not torch.Tensor:
        # a subclass: a DTensor sharded on an indexed dim (_subclass)
        routed = _subclass.route("scatter_nd_", input, indices, updates, reduction,
                                 input_dimension_count, indices_dimension_count, check_indices)
        if routed is not None:
            return routed
    level = _state.level
    if type(check_indices) is not bool:     # the dispatcher would take an int for a bool
        check_bool("scatter_nd_", "check_indices", check_indices)
    args = (input, indices, updates, reduction, input_dimension_count, indices_dimension_count,
            level, check_indices, False)
    if level != PERMISSIVE:
        check_level(lambda: _check_call(*args, op="scatter_nd_"))
    try:
        redispatch, keyset = _INPLACE_REDISPATCH, None
        if redispatch is not None and not _autograd.derivative_needed((input, indices, updates)):
            keyset = _backend.eager_keyset((input, indices, updates))
        if redispatch is not None and keyset is not None:
            redispatch(keyset, *args)
        else:
            _INPLACE_OP(*args)
        return input
    except Exception as exc:
        if type(input) is not torch.Tensor:
            # a subclass: DTensor's refusal of a placement change, in the op's terms
            refused = _subclass.refusal("scatter_nd_", exc, input, indices, updates)
            if refused is not None:
                raise refused from exc
        # The documented exception for a refused call, with the kernel's message (see gather_nd).
        raise_documented(lambda: _check_call(*args, op="scatter_nd_"))
        raise


# Docstrings for torch.ops.torch_dml_ops.* (help() on the dispatcher's objects).
document("scatter_nd", """\
DML_OPERATOR_SCATTER_ND (ONNX ScatterND-18): a copy of ``input`` with ``updates`` written
(``reduction`` "none") or combined ("add", "mul", "max", "min") at the index tuples.  The
registered op behind :func:`torch_dml_ops.scatter_nd`, which documents every argument;
``check_indices=False`` skips out-of-range tuples instead of raising IndexError, on every
backend; ``deterministic=True`` makes the last duplicate tuple in index order win for "none"
(set for calls recorded by autograd, and implied by torch's deterministic mode).""")
document("scatter_nd_out", """\
scatter_nd into a preallocated ``out`` (the input's shape and dtype, no overlap with the
inputs, written only after every index is checked).  Not differentiable.""")
document("scatter_nd_", """\
In-place scatter_nd (:func:`torch_dml_ops.scatter_nd_`): writes ``updates`` into
``input`` itself, after every index is checked.  Recorded by autograd like ``index_copy_``.""")
