"""scatter_nd on the portable path: check and linearize the tuples, copy, then one indexed write
(``index_put_`` / ``index_reduce_``) of rows, with the duplicate policy of the op."""
from __future__ import annotations

from typing import Optional

import torch

from .._checks import (check_out, check_scatter_nd, check_storages, resolved, unrecorded,
                       written)
from .._forms import GatherLayout, gather_layout
from .._tables import SIGNED_INDEX_DTYPES, bits_view
from ._common import (MOVE_AS, SIGN_BIT_64, as_movable, check_and_wrap_plan, flip_sign_bit, in_range,
                      index_matrix, linear_rows, masked_rows, report_bad_index,
                      torch_checks_bounds)

_REDUCE_OP = {"mul": "prod", "max": "amax", "min": "amin"}
HALF_FLOATS = (torch.float16, torch.bfloat16)
# max/min compare values, so an unsigned type cannot be moved as its signed twin: widen instead.
_WIDEN = {torch.uint16: torch.int32, torch.uint32: torch.int64}


#: uint64 has no wider type: its order is int64's after flipping the sign bit (0 -> -2**63,
#: 2**64 - 1 -> 2**63 - 1), an involution.

def _arith_dtype(dtype: torch.dtype, reduction: str) -> torch.dtype:
    """The dtype the scatter computes in: same bits where the reduction is bit-compatible."""
    if dtype == torch.bool:
        return torch.bool if reduction == "add" else torch.uint8   # add on bool is logical or
    if reduction in ("max", "min") and dtype in _WIDEN:
        return _WIDEN[dtype]
    return MOVE_AS.get(dtype, dtype)


_WIDE = ((16, torch.complex128), (8, torch.int64), (4, torch.int32), (2, torch.int16))


def wide_rows(a: torch.Tensor, b: torch.Tensor):
    """Views of two contiguous ``[n, S]`` tensors with the widest element (up to 16 bytes) that
    tiles a row, for row copies: torch's index kernels move one element at a time, so 16-byte
    elements copy a 256-byte row faster than float32 ones (M6 in docs/benchmarks.md, "Measured
    choices").  Pure data movement: the bits of any
    dtype are preserved (no arithmetic touches the wide elements)."""
    row_bytes = a.shape[1] * a.element_size()
    for w, dt in _WIDE:
        if w <= a.element_size():
            break
        if (row_bytes % w == 0 and (a.storage_offset() * a.element_size()) % w == 0
                and (b.storage_offset() * b.element_size()) % w == 0):
            return a.view(dt), b.view(dt)
    return a, b


def scatter_overwrite_rows(work: torch.Tensor, lin: torch.Tensor, upd: torch.Tensor,
                           deterministic: Optional[bool] = None) -> None:
    """``work[lin[t]] = upd[t]`` with duplicates resolved: the last tuple in index order wins.

    A row is claimed by the highest ordinal that targets it (``scatter_reduce_`` amax, which is
    order-independent), and only the claiming tuples write: rows never mix two updates.  Single
    elements cannot mix, so outside deterministic mode an element scatter writes directly.
    ``deterministic``: None reads torch's deterministic mode.
    """
    n = lin.numel()
    if deterministic is None:
        deterministic = torch.are_deterministic_algorithms_enabled()
    if work.shape[1] == 1 and not deterministic:
        work.index_copy_(0, lin, upd)
        return
    ord_dtype = torch.int32 if n < 2**31 else torch.int64
    claim = torch.full((work.shape[0],), -1, dtype=ord_dtype, device=work.device)
    pos = torch.arange(n, dtype=ord_dtype, device=work.device)
    claim.scatter_reduce_(0, lin, pos, "amax")
    keep = claim.index_select(0, lin) == pos
    work, upd = wide_rows(work, upd.contiguous())
    if bool(keep.all()):
        work.index_copy_(0, lin, upd)
    else:
        sel = keep.nonzero().squeeze(1)
        work.index_copy_(0, lin.index_select(0, sel), upd.index_select(0, sel))


def ordered_rows(work: torch.Tensor, lin: torch.Tensor, upd: torch.Tensor, combine) -> None:
    """``work[lin[t]] = combine(work[lin[t]], upd[t])`` for every tuple (``torch.mul``,
    ``torch.add``), each row's updates applied in index order (the CPU's order), bit for bit
    the CPU's sequential result on any device.

    Round r applies every row's r-th tuple (its occurrence number in a stable sort by row), so
    a round's rows are distinct: a gather, a multiply and an ``index_copy_`` of unique rows, all
    deterministic.  One host read (the tuples per round); as many rounds as the most repeated
    row has tuples."""
    n = lin.numel()
    sorted_lin, perm = torch.sort(lin, stable=True)
    pos = torch.arange(n, device=lin.device)
    start = torch.ones(n, dtype=torch.bool, device=lin.device)
    start[1:] = sorted_lin[1:] != sorted_lin[:-1]
    rank = pos - torch.where(start, pos, 0).cummax(0).values     # occurrence within its row
    by_round = perm.index_select(0, torch.sort(rank, stable=True).indices)
    first = 0
    for count in torch.bincount(rank).tolist():                  # the one host read
        sel = by_round[first:first + count]
        rows = lin.index_select(0, sel)
        work.index_copy_(0, rows, combine(work.index_select(0, rows), upd.index_select(0, sel)))
        first += count


def _cpu_max(row: torch.Tensor, upd: torch.Tensor) -> torch.Tensor:
    """One step of the CPU's ``scatter_reduce_(..., "amax")``: the update where it is NaN or
    greater, else the row's value (which a tie of -0.0 and 0.0 keeps)."""
    return torch.where(torch.isnan(upd) | (upd > row), upd, row)


def _cpu_min(row: torch.Tensor, upd: torch.Tensor) -> torch.Tensor:
    """One step of the CPU's ``scatter_reduce_(..., "amin")`` (see ``_cpu_max``)."""
    return torch.where(torch.isnan(upd) | (upd < row), upd, row)


#: One step of each reduction in the CPU's order (ordered_rows).
_ORDERED_STEP = {"add": torch.add, "mul": torch.mul, "max": _cpu_max, "min": _cpu_min}


#: Below this many updated elements one index_put_ call scatters: it wraps negative indices and
#: range-checks in C++.  With accumulate (reduction "add") torch runs it in one thread on the CPU,
#: in index order, so the sums round as the C++ kernel's do; an overwrite it runs in parallel and
#: keeps any duplicate (measured on torch 2.13 and 2.14.1, two threads), so an overwrite takes it
#: only for a single tuple (the KV-cache row), which has none.
SMALL_SCATTER = 16384


def scatter_nd_torch(dst: torch.Tensor, indices: torch.Tensor, updates: torch.Tensor,
                     lay: GatherLayout, reduction: str,
                     source: Optional[torch.Tensor] = None, fresh: bool = False,
                     op: str = "scatter_nd",
                     deterministic: Optional[bool] = None, check: bool = True) -> torch.Tensor:
    """Scatter ``updates`` into ``dst`` in place; ``source`` (the input) is first copied into
    ``dst`` when given, else ``dst`` already holds it (the in-place variant).

    Every index is range-checked before anything is written, so a failing call leaves ``dst``
    as it was (it may be the caller's tensor: the in-place variant and ``out=``); a ``fresh``
    ``dst`` (a new tensor nobody else sees) may be written before the check completes.
    ``op`` names the caller in errors (``scatter_nd_`` for the in-place variant);
    ``deterministic`` (None: torch's deterministic mode) makes "none" keep exactly the last
    duplicate in index order.  ``check=False``: out-of-range tuples are skipped instead of
    raising (the check runs before any write, and only a call that has such a tuple is redone
    without it).
    """
    if check:
        return _scatter_checked(dst, indices, updates, lay, reduction, source, fresh, op,
                                deterministic)
    if reduction != "none" and not torch_checks_bounds(dst):
        return _scatter_masked(dst, indices, updates, lay, reduction, source, deterministic)
    try:    # not fresh: every index is checked before the first write, so a retry starts clean
        return _scatter_checked(dst, indices, updates, lay, reduction, source, False, op,
                                deterministic)
    except IndexError:
        return _scatter_skipping(dst, indices, updates, lay, reduction, source, op,
                                 deterministic)


def _scatter_skipping(dst, indices, updates, lay, reduction, source, op, deterministic):
    """``check_indices=False`` with out-of-range tuples: the scatter of the in-range ones, in
    their index order, into a natural-form work copy, which then overwrites ``dst``."""
    n, k = lay.n_tuples, lay.k
    idx2 = index_matrix(indices, n, k, small=False)
    keep = in_range(idx2, lay.index_sizes, indices.dtype in SIGNED_INDEX_DTYPES)
    keep = keep.nonzero().squeeze(1)
    kept = gather_layout(op, lay.natural_input_shape, (keep.numel(), k), 0, None, None,
                         updates_name="UpdatesTensor")
    work = (dst if source is None else source).reshape(lay.natural_input_shape).clone(
        memory_format=torch.contiguous_format)
    # int64 coordinates (a valid uint64 is < 2**63); the updates' rows moved as raw bits
    kept_upd = bits_view(updates.reshape(n, lay.slice_len)).index_select(0, keep)
    _scatter_checked(work, idx2.index_select(0, keep).to(torch.int64),
                     kept_upd.view(updates.dtype).reshape(kept.natural_out_shape), kept,
                     reduction, None, True, op, deterministic)
    return dst.copy_(work.reshape(dst.shape))


def _scatter_checked(dst: torch.Tensor, indices: torch.Tensor, updates: torch.Tensor,
                     lay: GatherLayout, reduction: str, source: Optional[torch.Tensor],
                     fresh: bool, op: str, deterministic: Optional[bool]) -> torch.Tensor:
    k, sizes, n_tuples = lay.k, lay.index_sizes, lay.n_tuples
    if n_tuples == 0:
        return dst if source is None else dst.copy_(source)
    signed = indices.dtype in SIGNED_INDEX_DTYPES
    idx2 = index_matrix(indices, n_tuples, k, small=False)
    if 0 in sizes:
        report_bad_index(op, indices, idx2, sizes, signed, lay.dim_names(dst.dim()))
    rows, slice_len = lay.rows, lay.slice_len      # no batch dims in a scatter: rows = prod(sizes)
    # (CPU only: CUDA's index_put_ keeps any duplicate, even mixing rows, and adds in any order;
    # not for a float16/bfloat16 add: index_put_ rounds after every add, where the one rule is
    # a float32 sum in index order rounded once, index_add_'s)
    small = (n_tuples * slice_len <= SMALL_SCATTER
             and ((reduction == "add" and dst.dtype not in HALF_FLOATS)
                  or (reduction == "none" and n_tuples == 1))
             and dst.dtype != torch.bool and torch_checks_bounds(dst))
    if small:
        # index_put_ checks each dimension (unless nothing moves)
        if fresh and slice_len != 0:
            if not signed and bool((idx2 < 0).any()):     # uint64 >= 2**63
                report_bad_index(op, indices, idx2, sizes, signed, lay.dim_names(dst.dim()))
        else:
            check_and_wrap_plan(op, indices, idx2, sizes, signed, lay.dim_names(dst.dim()))
        if source is not None:
            dst.copy_(source)
        if slice_len == 0:
            return dst
        target = as_movable(dst)
        upd = as_movable(updates)
        if lay.dml_form:
            target = target.reshape(lay.natural_input_shape)        # a view: drops padding
        if lay.dml_form or indices.dim() != 2:
            upd = upd.reshape((n_tuples,) + tuple(lay.slice_shape))
        try:
            target.index_put_(idx2.unbind(1), upd, accumulate=reduction == "add")
        except IndexError:
            report_bad_index(op, indices, idx2, sizes, signed, lay.dim_names(dst.dim()))
            raise
        return dst
    names = lay.dim_names(dst.dim())
    wrap = check_and_wrap_plan(op, indices, idx2, sizes, signed, names)
    if source is not None:
        dst.copy_(source)
    if rows * slice_len == 0 or slice_len == 0:
        return dst
    lin = linear_rows(idx2, sizes, wrap, 1, n_tuples)
    if lin.dtype != torch.int64:
        lin = lin.long()
    return _reduce_rows(dst, lin, updates, lay, reduction, deterministic)


def _identity(dtype: torch.dtype, reduction: str):
    """The value a reduction leaves every element unchanged with, bits included: x + (-0.0) is
    x (also -0.0 and NaN payloads), x * 1, max(x, lowest), min(x, highest)."""
    if reduction == "mul":
        return 1
    if dtype.is_floating_point:
        return {"add": -0.0, "max": float("-inf"), "min": float("inf")}[reduction]
    if dtype == torch.bool:
        return False
    info = torch.iinfo(dtype)
    return {"add": 0, "max": info.min, "min": info.max}[reduction]


def _scatter_masked(dst, indices, updates, lay, reduction, source, deterministic):
    """``check_indices=False`` for the reductions where torch's index kernels assert (CUDA):
    an out-of-range tuple lands on row 0 with the reduction's identity as its update (row 0
    unchanged, bit for bit), so nothing is read on the host (the call can be captured in a CUDA
    graph) except by deterministic mul's ordered product (one read)."""
    if source is not None:
        dst.copy_(source)
    n = lay.n_tuples
    if n == 0 or lay.rows * lay.slice_len == 0 or 0 in lay.index_sizes:
        return dst
    idx2 = index_matrix(indices, n, lay.k, small=False)
    rows, ok = masked_rows(idx2, lay.index_sizes, indices.dtype in SIGNED_INDEX_DTYPES)
    return _reduce_rows(dst, rows, updates, lay, reduction, deterministic, ok)


def _reduce_rows(dst, lin, updates, lay, reduction, deterministic, keep=None, rows=None):
    """Apply every tuple's slice to its row ``lin`` of ``dst`` (viewed ``[rows, slice]``) with
    the duplicate policy of ``reduction``; ``keep``: tuples whose update becomes the reduction's
    identity (``_scatter_masked``).  A ``dst`` that is not contiguous (a permuted KV cache, a
    slice) goes through :func:`_reduce_strided`: its addressed rows only."""
    if rows is None:
        if not dst.is_contiguous():
            return _reduce_strided(dst, lin, updates, lay, reduction, deterministic, keep)
        rows = lay.rows
    slice_len, n_tuples = lay.slice_len, lay.n_tuples
    adt = _arith_dtype(dst.dtype, reduction)
    same_bits = adt.itemsize == dst.dtype.itemsize and adt != torch.bool or adt == dst.dtype
    # uint64 max/min: int64 arithmetic on sign-flipped copies (torch has no uint64 reductions)
    flipped = dst.dtype == torch.uint64 and reduction in ("max", "min")
    in_place = same_bits and dst.is_contiguous() and not flipped
    if in_place:
        work = dst.view(adt)
    elif flipped:
        work = flip_sign_bit(dst).contiguous()
    else:
        work = (dst.view(adt) if same_bits else dst.to(adt)).contiguous()
    work2d = work.view(rows, slice_len)
    upd = updates.reshape(n_tuples, slice_len)
    if flipped:
        upd = flip_sign_bit(upd)
    else:
        upd = upd.view(adt) if same_bits and adt != upd.dtype else upd.to(adt)
    if keep is not None:
        identity = torch.full((), _identity(upd.dtype, reduction), dtype=upd.dtype,
                              device=upd.device)
        upd = torch.where(keep.unsqueeze(1), upd, identity)
    # Off the CPU, torch's kernels apply a row's duplicates in their own order: CUDA's
    # index_add_ sums them so (atomics; in deterministic mode a sorted, warp-parallel sum), its
    # amax/amin keep whichever of -0.0 and 0.0 (or of two NaNs) lands first, and its "prod" has
    # no deterministic implementation at all.  In deterministic mode the rounds of ordered_rows
    # apply them in index order instead: the CPU's result, bit for bit.
    ordered = (reduction != "none" and (reduction == "mul" or upd.is_floating_point())
               and not torch_checks_bounds(work2d) and _deterministic(deterministic))
    if reduction == "none":
        scatter_overwrite_rows(work2d, lin, upd, deterministic)
    elif reduction == "add" and upd.dtype in HALF_FLOATS and not torch_checks_bounds(work2d):
        # float16/bfloat16 sums in float32, rounded once per element (the CPU's index_add_
        # with int64 indices, whatever the number of updates): in index order in deterministic
        # mode, else in the atomics' order (CUDA's half-precision atomics would round per add)
        wide = work2d.float()
        if ordered:
            ordered_rows(wide, lin, upd.float(), torch.add)
        else:
            wide.index_add_(0, lin, upd.float())
        work2d.copy_(wide)
    elif ordered:
        ordered_rows(work2d, lin, upd, _ORDERED_STEP[reduction])
    elif reduction == "add":
        work2d.index_add_(0, lin, upd)     # (float16/bfloat16 on the CPU: summed in float32)
    else:
        work2d.scatter_reduce_(0, lin.unsqueeze(1).expand(n_tuples, slice_len), upd,
                               _REDUCE_OP[reduction], include_self=True)
    if flipped:
        work.bitwise_xor_(SIGN_BIT_64)
    if not in_place:
        (dst.view(adt) if same_bits else dst).copy_(work.view(dst.shape))
    return dst


class AddressedRows:
    """The rows of a strided target ``view`` (natural form ``[*index_sizes, *slice]``, any
    strides) that tuples address, moved into a compact contiguous buffer and back: a scatter
    into a view (a permuted KV cache, a slice) then moves those rows only, never a contiguous
    copy of the whole target.

    ``lin``: each tuple's row number, ``rows`` (one past the last) for a tuple to skip.  Sync-free
    (torch ops on ``lin``'s device, no host read, so a CUDA call stays capturable): the distinct
    rows are numbered in row order by a sort, giving ``n`` slots of which the first m are the
    distinct rows and the rest repeat the last one.  ``compact`` is ``[n, *slice]`` (the slots'
    rows, read through ``view``'s strides), ``local`` each tuple's slot (``n`` for a skipped
    tuple, out of range for a scatter into ``compact``).  Each row sees its tuples in their index
    order, as in the target itself, so any reduction gives the target's own result.
    :meth:`write_back` writes every slot back, the repeats with the last row's own final
    values (duplicates of identical bytes: any order gives the same result)."""

    def __init__(self, view: torch.Tensor, lin: torch.Tensor, index_sizes, rows: int):
        n = lin.numel()
        dev = lin.device
        s, perm = torch.sort(lin)
        first = torch.ones(n, dtype=torch.bool, device=dev)
        first[1:] = s[1:] != s[:-1]
        slot = torch.cumsum(first, 0) - 1                       # each sorted tuple's slot
        valid = s < rows
        # the last slot of an addressed row (-1: none; every later slot repeats it)
        last = torch.where(valid, slot, -1).amax()
        local = torch.empty_like(slot)
        local[perm] = torch.where(valid, slot, n)
        row_of = torch.zeros(n, dtype=s.dtype, device=dev)
        row_of.scatter_(0, slot, torch.where(valid, s, 0))       # equal values on duplicates
        self.fix = torch.minimum(torch.arange(n, device=dev), last.clamp(min=0))
        row_of = row_of.index_select(0, self.fix)
        coords = []
        rest = row_of
        for size in reversed(index_sizes):
            coords.append(rest % size)
            rest = rest // size
        self.coords = tuple(reversed(coords))
        self.view = bits_view(view)
        self.local = local
        self.compact = self.view[self.coords].contiguous().view(view.dtype)

    def write_back(self) -> None:
        compact = bits_view(self.compact).index_select(0, self.fix)
        self.view.index_put_(self.coords, compact)


def _reduce_strided(dst, lin, updates, lay, reduction, deterministic, keep):
    """:func:`_reduce_rows` into a ``dst`` of any layout through :class:`AddressedRows`: the
    addressed rows only (a contiguous work copy of ``dst`` would cost the whole tensor)."""
    nat = tuple(lay.index_sizes) + tuple(lay.slice_shape)
    try:
        view = dst.view(nat)        # drops or adds DML padding (size-1 dimensions)
    except RuntimeError:            # no view of the natural form: the contiguous work copy
        work = dst.contiguous()
        _reduce_rows(work, lin, updates, lay, reduction, deterministic, keep, lay.rows)
        return dst.copy_(work.view(dst.shape))
    rows = AddressedRows(view, lin, lay.index_sizes, lay.rows)
    _reduce_rows(rows.compact, rows.local, updates, lay, reduction, deterministic, keep,
                 lin.numel())
    rows.write_back()
    return dst


# ---------------------------------------------------------------------------------------------
# The op kernels (the schema's arguments): validate, then compute.  Shared with the Triton
# backend, which passes its own ``compute``.
# ---------------------------------------------------------------------------------------------

def _deterministic(flag: bool) -> bool:
    return flag or torch.are_deterministic_algorithms_enabled()


def _check_storages(op, input, indices, updates, out=None):
    check_storages(op, ("InputTensor", input), ("IndicesTensor", indices),
                   ("UpdatesTensor", updates), ("OutputTensor (out)", out))


def whole_input_tuples(op, dst, source, indices, updates, lay):
    """ONNX ScatterND's index tuples of size 0 (each update covers the whole input) as the
    k = 1 scatter into the input seen with one more leading dimension of size 1, every
    coordinate 0: the same single row, slices and order, so each backend's k = 1 path applies
    unchanged (its duplicate claims, reductions, rounding thresholds).  Returns ``(dst,
    source, indices, updates, lay)`` of that call; ``dst`` and ``source`` are views (the DML
    padding, all 1s, dropped by indexing)."""
    nat = tuple(lay.natural_input_shape)
    n = lay.n_tuples

    def lift(t):
        return None if t is None else t[(0,) * (t.dim() - len(nat))].unsqueeze(0)
    lay1 = gather_layout(op, (1,) + nat, (n, 1), 0, None, None, updates_name="UpdatesTensor")
    zeros = torch.zeros((n, 1), dtype=torch.int64, device=indices.device)
    return lift(dst), lift(source), zeros, updates.reshape((n,) + nat), lay1


def make_kernels(compute) -> dict:
    """``scatter_nd``, ``scatter_nd_out`` and ``scatter_nd_`` kernels around
    ``compute(op, dst, source, indices, updates, lay, reduction, check, deterministic, fresh)``,
    which checks every index, copies ``source`` into ``dst`` (unless None: ``dst`` already holds
    the input), then scatters, in that order, so a failing call writes nothing the caller owns
    (a ``fresh`` ``dst`` is a new tensor nobody else sees).  ``compute`` sees index tuples of
    size 1 or more: a call with tuples of size 0 reaches it as :func:`whole_input_tuples`.

    The kernels check what every backend needs (the metadata rules, storage bounds, the out= or
    in-place target), resolve negative-bit views (a negative-bit target is written through its
    negation by ``copy_`` from a fresh result), and bump the version counter of what they write.
    ``deterministic``: the op's argument or torch's deterministic mode."""

    def run(op, dst, source, indices, updates, lay, reduction, check, det, fresh):
        if lay.k == 0:
            dst, source, indices, updates, lay = whole_input_tuples(op, dst, source, indices,
                                                                    updates, lay)
        compute(op, dst, source, indices, updates, lay, reduction, check, det, fresh)

    def fresh_result(input, indices, updates, lay, reduction, check, det):
        out = input.clone(memory_format=torch.contiguous_format)
        run("scatter_nd", out, None, indices, updates, lay, reduction, check, det, True)
        return out

    def write(op, target, source, indices, updates, lay, reduction, check, det):
        indices, updates = resolved(indices), resolved(updates)
        if target.is_neg():
            base = resolved(source if source is not None else target)
            target.copy_(fresh_result(base, indices, updates, lay, reduction, check, det))
            return
        run(op, unrecorded(target), None if source is None else resolved(source), indices,
            updates, lay, reduction, check, det, False)
        written(target)

    def scatter_nd(input, indices, updates, reduction="none", input_dimension_count=None,
                   indices_dimension_count=None, feature_level="permissive", check_indices=True,
                   deterministic=False):
        lay = check_scatter_nd(input, indices, updates, reduction, input_dimension_count,
                               indices_dimension_count, feature_level, check_indices,
                               deterministic)
        _check_storages("scatter_nd", input, indices, updates)
        return fresh_result(resolved(input), resolved(indices), resolved(updates), lay,
                            reduction, check_indices, _deterministic(deterministic))

    def scatter_nd_out(input, indices, updates, reduction="none", input_dimension_count=None,
                       indices_dimension_count=None, feature_level="permissive",
                       check_indices=True, deterministic=False, *, out):
        lay = check_scatter_nd(input, indices, updates, reduction, input_dimension_count,
                               indices_dimension_count, feature_level, check_indices,
                               deterministic)
        check_out("scatter_nd", out, input.shape, input.dtype, input.device,
                  (("InputTensor", input), ("IndicesTensor", indices),
                   ("UpdatesTensor", updates)))
        _check_storages("scatter_nd", input, indices, updates, out)
        write("scatter_nd", out, input, indices, updates, lay, reduction, check_indices,
              _deterministic(deterministic))

    def scatter_nd_(input, indices, updates, reduction="none", input_dimension_count=None,
                    indices_dimension_count=None, feature_level="permissive",
                    check_indices=True, deterministic=False):
        lay = check_scatter_nd(input, indices, updates, reduction, input_dimension_count,
                               indices_dimension_count, feature_level, check_indices,
                               deterministic, op="scatter_nd_")
        check_out("scatter_nd_", input, input.shape, input.dtype, input.device,
                  (("IndicesTensor", indices), ("UpdatesTensor", updates)),
                  name="InputTensor (the in-place target)")
        _check_storages("scatter_nd_", input, indices, updates)
        write("scatter_nd_", input, None, indices, updates, lay, reduction, check_indices,
              _deterministic(deterministic))

    return {"scatter_nd": scatter_nd, "scatter_nd_out": scatter_nd_out,
            "scatter_nd_": scatter_nd_}


def _compute(op, dst, source, indices, updates, lay, reduction, check, deterministic, fresh):
    scatter_nd_torch(dst, indices, updates, lay, reduction, source, fresh, op=op,
                     deterministic=deterministic, check=check)


KERNELS = make_kernels(_compute)
