"""gather_nd on the portable path: linearize the index tuples, then one ``index_select`` of rows
(or, for small calls, one advanced-indexing kernel)."""
from __future__ import annotations

from typing import Optional

import torch

from .._checks import check_gather_nd, check_out, check_storages, resolved, unrecorded, written
from .._errors import message
from .._forms import GatherLayout, backward_layout
from .._tables import SIGNED_INDEX_DTYPES, bits_view
from ._common import (as_movable, check_and_wrap_plan, in_range, index_matrix, linear_rows,
                      masked_rows, report_bad_index, torch_checks_bounds)

#: Up to this many tuples (without batch dims), moving up to SMALL_ELEMENTS elements, one
#: advanced-indexing call does everything: it wraps negative indices and range-checks each
#: dimension in C++, saving the separate reduction, host sync and linearization, whose fixed
#: costs dominate small calls.  It copies element by element, so large slices go to index_select.
SMALL_TUPLES = 2048
SMALL_ELEMENTS = 16384


def gather_nd_torch(input: torch.Tensor, indices: torch.Tensor, lay: GatherLayout, check: bool,
                    out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """gather_nd with torch ops: linearize the index tuples, then one ``index_select`` of rows.

    Writes into ``out`` when given (any strides), else returns a new tensor.  ``check=False``:
    an out-of-range tuple gives a zero slice instead of the ``IndexError`` (the checked gather
    finds it before writing into ``out``, and the call is redone: no cost without one).
    """
    if check:
        return _gather_checked(input, indices, lay, out)
    if not torch_checks_bounds(input):
        return _gather_masked(input, indices, lay, out)
    try:
        return _gather_checked(input, indices, lay, out)
    except IndexError:
        return _gather_skipping(input, indices, lay, out)


def _gather_skipping(input: torch.Tensor, indices: torch.Tensor, lay: GatherLayout,
                     out: Optional[torch.Tensor]) -> torch.Tensor:
    """``check_indices=False`` with out-of-range tuples: the gather of the in-range ones, zeros
    for the others' slices."""
    n = lay.n_tuples
    idx2 = index_matrix(indices, n, lay.k, small=False)
    ok = in_range(idx2, lay.index_sizes, indices.dtype in SIGNED_INDEX_DTYPES)
    if lay.slice_len == 0 or 0 in lay.index_sizes:      # nothing to read
        res = torch.zeros(lay.out_shape, dtype=input.dtype, device=input.device)
    else:
        # in range everywhere (a bad tuple reads row 0), as int64: a valid uint64 is < 2**63
        safe = torch.where(ok.unsqueeze(1), idx2, 0).to(torch.int64).reshape(indices.shape)
        # (contiguous: from a strided input the gathered slices may not be; a copy only then)
        res = _gather_checked(input, safe, lay, None).contiguous()
        bits_view(res).view(n, lay.slice_len).masked_fill_(~ok.unsqueeze(1), 0)
    return res if out is None else out.copy_(res)


def _gather_masked(input: torch.Tensor, indices: torch.Tensor, lay: GatherLayout,
                   out: Optional[torch.Tensor]) -> torch.Tensor:
    """``check_indices=False`` where torch's index kernels assert (CUDA): every tuple reads a row
    in range (an out-of-range one row 0), then its slice is zeroed; no host read, so the call
    can be captured in a CUDA graph."""
    n = lay.n_tuples
    if n == 0 or lay.slice_len == 0 or 0 in lay.index_sizes:    # nothing to read
        res = torch.zeros(lay.out_shape, dtype=input.dtype, device=input.device)
        return res if out is None else out.copy_(res)
    idx2 = index_matrix(indices, n, lay.k, small=False)
    rows, ok = masked_rows(idx2, lay.index_sizes, indices.dtype in SIGNED_INDEX_DTYPES,
                           lay.batch, n // lay.batch)
    src = as_movable(input)
    if src.is_contiguous():
        res = torch.index_select(src.view(lay.rows, lay.slice_len), 0, rows)
    else:
        # read through the strides (advanced indexing on the natural form's coordinates), not
        # from a reshape's contiguous copy of the whole input
        nat = src.reshape(lay.natural_input_shape)     # a view: drops or adds DML padding
        coords = []
        for size in reversed(lay.natural_input_shape[:lay.batch_dims + lay.k]):
            coords.append(rows % size)
            rows = rows // size
        res = nat[tuple(reversed(coords))].reshape(n, lay.slice_len)
    res = res.masked_fill_(~ok.unsqueeze(1), 0)
    res = res.view(input.dtype).reshape(lay.out_shape)   # (a view when res is contiguous)
    return res if out is None else out.copy_(res)


def _gather_checked(input: torch.Tensor, indices: torch.Tensor, lay: GatherLayout,
                    out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """:func:`gather_nd_torch` with every index checked (``IndexError``), before anything is
    written into ``out``."""
    op = "gather_nd"
    b, k = lay.batch_dims, lay.k
    sizes = lay.index_sizes
    n_tuples = lay.n_tuples
    if n_tuples == 0:
        return torch.empty(lay.out_shape, dtype=input.dtype, device=input.device) if out is None else out
    signed = indices.dtype in SIGNED_INDEX_DTYPES
    batch, rows, slice_len = lay.batch, lay.rows, lay.slice_len
    idx2 = index_matrix(indices, n_tuples, k, rows < 2**31)
    if slice_len == 0:
        # Nothing moves (and torch's indexing skips its bounds check on an empty result), but
        # every index must still be in range, as on the other backends.
        check_and_wrap_plan(op, indices, idx2, sizes, signed, lay.dim_names(input.dim()))
        return torch.empty(lay.out_shape, dtype=input.dtype, device=input.device) if out is None else out

    # Torch's kernels check the bounds (an IndexError) on CPU only: elsewhere every index is
    # checked first, and the shortcuts that leave it to them are not taken.
    torch_checks = torch_checks_bounds(input)
    if (torch_checks and b == 0 and n_tuples <= SMALL_TUPLES
            and n_tuples * slice_len <= SMALL_ELEMENTS):
        if indices.dtype == torch.uint64 and bool((idx2 < 0).any()):
            report_bad_index(op, indices, idx2, sizes, signed, lay.dim_names(input.dim()))   # >= 2**63
        src = as_movable(input)
        if lay.dml_form:
            src = src.reshape(lay.natural_input_shape)
        try:
            res = src[idx2.unbind(1)]
        except IndexError:
            report_bad_index(op, indices, idx2, sizes, signed, lay.dim_names(input.dim()))
            raise
        if src.dtype != input.dtype:
            res = res.view(input.dtype)
        if lay.dml_form or indices.dim() != 2:
            res = res.view(lay.out_shape)
        if out is None:
            return res
        return out.copy_(res)

    names = lay.dim_names(input.dim())
    if 0 in sizes:     # tuples into an empty dimension: every index is out of range
        report_bad_index(op, indices, idx2, sizes, signed, names)
    if not input.is_contiguous():
        # Advanced indexing reads through the strides (no copy of the input) and wraps and
        # range-checks every dimension itself (on CPU; elsewhere checked here first).  Dropping
        # DML padding and merging the batch dims are views in all but exotic layouts.
        if not torch_checks:
            check_and_wrap_plan(op, indices, idx2, sizes, signed, names)
        elif not signed and bool((idx2 < 0).any()):    # uint64 >= 2**63
            report_bad_index(op, indices, idx2, sizes, signed, names)
        src = as_movable(input).reshape((batch,) + tuple(sizes) + tuple(lay.slice_shape))
        bidx = torch.arange(batch, device=input.device).unsqueeze(1)
        per_batch = n_tuples // batch
        try:
            res = src[(bidx,) + tuple(c.reshape(batch, per_batch) for c in idx2.unbind(1))]
        except IndexError:
            report_bad_index(op, indices, idx2, sizes, signed, names)
            raise
        res = res.view(input.dtype).view(lay.out_shape)
        return res if out is None else out.copy_(res)

    # Contiguous input: linearize the tuples, then one take (elements) or index_select (rows).
    # A fresh output may be written before the kernel finds a bad column-0 index (the error
    # then discards it), so the kernel may check column 0's upper bound (check_and_wrap_plan
    # says when that is sound); a caller's out= is fully checked first.
    delegate = b == 0 and out is None and torch_checks
    wrap = check_and_wrap_plan(op, indices, idx2, sizes, signed, names, 1 if delegate else 0)
    use_take = slice_len == 1 and idx2.dtype == torch.int64
    if use_take and delegate:
        wrap[0] = False     # take wraps negative linear indices itself
    if out is None:
        out = torch.empty(lay.out_shape, dtype=input.dtype, device=input.device)
    lin = linear_rows(idx2, sizes, wrap, batch, n_tuples // batch)
    src = as_movable(input).view(rows, slice_len)
    dst = as_movable(out)
    dst_2d = dst.view(n_tuples, slice_len) if dst.is_contiguous() else None
    try:
        if use_take:
            res = torch.take(src, lin, out=dst_2d.view(-1)) if dst_2d is not None else torch.take(src, lin)
        else:
            res = torch.index_select(src, 0, lin, out=dst_2d) if dst_2d is not None else torch.index_select(src, 0, lin)
    except IndexError:
        report_bad_index(op, indices, idx2, sizes, signed, names)
        raise
    if dst_2d is None:
        dst.copy_(res.view(dst.shape))
    return out


# ---------------------------------------------------------------------------------------------
# The op kernels (the schema's arguments): validate, then compute.  Shared with the Triton
# backend, which passes its own ``compute``.
# ---------------------------------------------------------------------------------------------

def make_kernels(compute) -> dict:
    """``gather_nd`` and ``gather_nd_out`` kernels around ``compute(input, indices, lay, check,
    out) -> Tensor``, which writes into ``out`` (a caller's, with any strides) or, when it is
    None, into a new tensor it returns.

    The kernels check what every backend needs (the metadata rules, storage bounds, the out=
    target), resolve negative-bit views, and bump the version counter of what they write.  On
    failure nothing the caller owns is modified (``compute`` checks every index before writing
    into a caller's ``out``)."""

    def gather_nd(input, indices, batch_dims=0, input_dimension_count=None,
                  indices_dimension_count=None, feature_level="permissive", check_indices=True):
        lay = check_gather_nd(input, indices, batch_dims, input_dimension_count,
                              indices_dimension_count, feature_level, check_indices)
        check_storages("gather_nd", ("InputTensor", input), ("IndicesTensor", indices))
        return compute(resolved(input), resolved(indices), lay, check_indices, None)

    def gather_nd_out(input, indices, batch_dims=0, input_dimension_count=None,
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
            out.copy_(compute(input, indices, lay, check_indices, None))
        else:
            compute(input, indices, lay, check_indices, unrecorded(out))
            written(out)

    return {"gather_nd": gather_nd, "gather_nd_out": gather_nd_out}


def gather_nd_backward(grad, indices, index_sizes, batch_dims, input_dimension_count,
                       indices_dimension_count):
    """grad_input = zeros of the input's shape (``grad``'s batch and trailing dims around
    ``index_sizes``) with ``grad``'s slices added at the gathered positions (duplicates
    accumulate): one ``index_add_`` of rows.  Every backend's (it is itself differentiable
    through the registered ops)."""
    input_shape, lay = backward_layout(grad.shape, indices.shape, index_sizes, batch_dims,
                                       input_dimension_count, indices_dimension_count)
    check_storages("gather_nd_backward", ("grad", grad), ("IndicesTensor", indices))
    op = "gather_nd_backward"
    try:
        grad_in = torch.zeros(lay.rows, lay.slice_len, dtype=grad.dtype, device=grad.device)
    except RuntimeError as e:
        raise RuntimeError(message("grad_alloc", op=op, shape=tuple(input_shape),
                                   dtype=grad.dtype) + f": {e}") from None
    indices, grad = resolved(indices), resolved(grad)
    if lay.n_tuples:
        signed = indices.dtype in SIGNED_INDEX_DTYPES
        idx2 = index_matrix(indices, lay.n_tuples, lay.k, lay.rows < 2**31)
        # The forward already range-checked these indices (a direct call of this op may not
        # have, empty slices included); this also finds which columns wrap.
        wrap = check_and_wrap_plan(op, indices, idx2, lay.index_sizes, signed,
                                   [f"index_sizes[{j}]" for j in range(lay.k)])
        if grad_in.numel():
            lin = linear_rows(idx2, lay.index_sizes, wrap, lay.batch, lay.n_tuples // lay.batch)
            grad_in.index_add_(0, lin, grad.reshape(lay.n_tuples, lay.slice_len))
    return grad_in.view(tuple(input_shape))


KERNELS = dict(make_kernels(gather_nd_torch), gather_nd_backward=gather_nd_backward)
