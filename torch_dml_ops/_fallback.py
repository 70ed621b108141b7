"""Portable implementations built from torch ops only (CPU, and any device torch runs on).

Each function receives tensors that already passed the metadata checks of ``_validation`` and the
layout computed by ``_forms``, and does the data-dependent index-range check itself: one min/max
pass and a host sync, or the bounds check of the torch kernel it calls.  The portable path always
checks (``check_indices=False`` only matters on the Triton path): the same pass tells it whether
negative indices must wrap.
"""
from __future__ import annotations

import functools
import math
from typing import List, Optional, Sequence

import torch

from ._forms import GatherLayout
from ._validation import SIGNED_INDEX_DTYPES, raise_index_error

# torch's index kernels refuse the unsigned types: move them as same-width signed integers (the
# gather is a bit-exact copy, so the reinterpretation is lossless).
_MOVE_AS = {torch.uint16: torch.int16, torch.uint32: torch.int32, torch.uint64: torch.int64}


def as_movable(t: torch.Tensor) -> torch.Tensor:
    alias = _MOVE_AS.get(t.dtype)
    return t if alias is None else t.view(alias)


# Floats moved as same-width integers where the exact bits must survive: torch's CPU gather of
# float16/bfloat16 goes through float32 and quiets signalling NaNs (0x7C01 -> 0x7E01) or rewrites
# bfloat16 NaNs (0x7F81 -> 0xFFFF).
_BITS_AS = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
            torch.float64: torch.int64}


def as_bits(t: torch.Tensor) -> torch.Tensor:
    """``t`` viewed as a same-width integer type (floats and unsigned types), for pure moves."""
    alias = _BITS_AS.get(t.dtype) or _MOVE_AS.get(t.dtype)
    return t if alias is None else t.view(alias)


def index_matrix(indices: torch.Tensor, n_tuples: int, k: int, small: bool) -> torch.Tensor:
    """Indices as a ``[n_tuples, k]`` signed tensor that index kernels accept.

    uint64 is reinterpreted (values >= 2**63 turn negative, which the range check rejects for an
    unsigned type); uint32 widens to int64; int32 stays int32 when every linear offset fits
    (``small``), which halves the bytes moved.
    """
    dt = indices.dtype
    idx = indices if indices.dim() == 2 else indices.reshape(n_tuples, k)
    if dt == torch.int64 or (dt == torch.int32 and small):
        return idx
    if dt == torch.uint64:
        return idx.view(torch.int64)
    return idx.to(torch.int64)


def first_bad_position(idx2: torch.Tensor, sizes: Sequence[int], signed: bool) -> int:
    size_t = torch.tensor(list(sizes), dtype=idx2.dtype, device=idx2.device)
    lo = -size_t if signed else torch.zeros_like(size_t)
    bad = (idx2 < lo) | (idx2 >= size_t)
    return int(bad.reshape(-1).nonzero()[0, 0])


def check_and_wrap_plan(op: str, indices: torch.Tensor, idx2: torch.Tensor, sizes: Sequence[int],
                        signed: bool, dim_names: Sequence[str], first: int = 0) -> List[bool]:
    """Range-check the index matrix and say which columns hold negative indices that must wrap
    (one host sync).

    When the checked dimensions have one size, one flat min/max over the contiguous matrix
    (2-4x cheaper than a per-column reduction) settles it unless there are negative indices;
    otherwise a per-column (dim=0) reduction checks every column.

    ``first=1`` lets the flat pass leave column 0's upper bound to the gather kernel
    (``take`` / ``index_select`` reject a linear row outside the tensor, and with the other
    columns in range that is exactly column 0's rule), so that dimension 0 need not have the
    others' size.  That is only sound while the linearization cannot overflow: the flat max
    also bounds column 0, and a row past ``2**31`` (int32) or ``2**63`` would wrap back into
    range (``2**30 * 4 == 0`` in int32), so such calls take the per-column check.
    """
    k = len(sizes)
    rest = sizes[first:]
    if not rest or min(rest) == max(rest):
        mn, mx = (v.item() for v in torch.aminmax(idx2))
        if mn >= 0 and (not rest or mx < rest[0]):
            if first == 0 or mx < sizes[0] or _linear_fits(mx, sizes, idx2.dtype):
                return [False] * k
    mns, mxs = (v.tolist() for v in torch.aminmax(idx2, dim=0))
    for j in range(k):
        # unsigned: uint64 >= 2**63 reads negative here
        if mns[j] < (-sizes[j] if signed else 0) or mxs[j] >= sizes[j]:
            pos = first_bad_position(idx2, sizes, signed)
            raise_index_error(op, indices, pos, indices.shape, sizes, dim_names, signed, k)
    return [signed and v < 0 for v in mns]


def _linear_fits(col0_max: int, sizes: Sequence[int], dtype: torch.dtype) -> bool:
    """Whether ``col0 * stride_0 + (a row of the other, in-range columns)`` stays below the
    index dtype's limit for every ``0 <= col0 <= col0_max``."""
    limit = 2**31 if dtype == torch.int32 else 2**63
    return len(sizes) == 1 or (col0_max + 1) * math.prod(sizes[1:]) <= limit


def linear_rows(idx2: torch.Tensor, sizes: Sequence[int], wrap: Sequence[bool], batch: int,
                per_batch: int) -> torch.Tensor:
    """Row number of each tuple in the input viewed as ``[batch * prod(sizes), slice]``."""
    k = len(sizes)
    cols = []
    for j in range(k):
        c = idx2[:, j]
        if wrap[j]:
            c = torch.where(c < 0, c + sizes[j], c)
        cols.append(c)
    lin = cols[k - 1]
    owned = wrap[k - 1]
    stride = 1
    for j in range(k - 2, -1, -1):
        stride *= sizes[j + 1]
        if owned:
            lin.add_(cols[j], alpha=stride)
        else:
            lin = torch.add(lin, cols[j], alpha=stride)
            owned = True
    if batch > 1:
        rows_per_batch = stride * sizes[0]
        base = torch.arange(batch, dtype=lin.dtype, device=lin.device).mul_(rows_per_batch)
        lin = torch.add(lin.view(batch, per_batch), base.unsqueeze(1)).view(-1)
    elif lin.stride(0) != 1:
        lin = lin.contiguous()
    return lin


#: Up to this many tuples (without batch dims), moving up to SMALL_ELEMENTS elements, one
#: advanced-indexing call does everything: it wraps negative indices and range-checks each
#: dimension in C++, saving the separate reduction, host sync and linearization, whose fixed
#: costs dominate small calls.  It copies element by element, so large slices go to index_select.
SMALL_TUPLES = 2048
SMALL_ELEMENTS = 16384


def _report_bad_index(op: str, indices: torch.Tensor, idx2: torch.Tensor, sizes: Sequence[int],
                      signed: bool, dim_names: Sequence[str]) -> None:
    pos = first_bad_position(idx2, sizes, signed)
    raise_index_error(op, indices, pos, indices.shape, sizes, dim_names, signed, len(sizes))


def gather_nd_torch(input: torch.Tensor, indices: torch.Tensor, lay: GatherLayout, check: bool,
                    out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """gather_nd with torch ops: linearize the index tuples, then one ``index_select`` of rows.

    Writes into ``out`` when given (any strides), else returns a new tensor.
    """
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

    if b == 0 and n_tuples <= SMALL_TUPLES and n_tuples * slice_len <= SMALL_ELEMENTS:
        if indices.dtype == torch.uint64 and bool((idx2 < 0).any()):
            _report_bad_index(op, indices, idx2, sizes, signed, lay.dim_names(input.dim()))   # >= 2**63
        src = as_movable(input)
        if lay.dml_form:
            src = src.reshape(lay.natural_input_shape)
        try:
            res = src[idx2.unbind(1)]
        except IndexError:
            _report_bad_index(op, indices, idx2, sizes, signed, lay.dim_names(input.dim()))
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
        _report_bad_index(op, indices, idx2, sizes, signed, names)
    if not input.is_contiguous():
        # Advanced indexing reads through the strides (no copy of the input) and wraps and
        # range-checks every dimension itself.  Dropping DML padding and merging the batch dims
        # are views in all but exotic layouts.
        if not signed and bool((idx2 < 0).any()):    # uint64 >= 2**63
            _report_bad_index(op, indices, idx2, sizes, signed, names)
        src = as_movable(input).reshape((batch,) + tuple(sizes) + tuple(lay.slice_shape))
        bidx = torch.arange(batch, device=input.device).unsqueeze(1)
        per_batch = n_tuples // batch
        try:
            res = src[(bidx,) + tuple(c.reshape(batch, per_batch) for c in idx2.unbind(1))]
        except IndexError:
            _report_bad_index(op, indices, idx2, sizes, signed, names)
            raise
        res = res.view(input.dtype).view(lay.out_shape)
        return res if out is None else out.copy_(res)

    # Contiguous input: linearize the tuples, then one take (elements) or index_select (rows).
    # A fresh output may be written before the kernel finds a bad column-0 index (the error
    # then discards it), so the kernel may check column 0's upper bound (check_and_wrap_plan
    # says when that is sound); a caller's out= is fully checked first.
    delegate = b == 0 and out is None
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
        _report_bad_index(op, indices, idx2, sizes, signed, names)
        raise
    if dst_2d is None:
        dst.copy_(res.view(dst.shape))
    return out


# ---------------------------------------------------------------------------------------------
# scatter_nd
# ---------------------------------------------------------------------------------------------

_REDUCE_OP = {"mul": "prod", "max": "amax", "min": "amin"}
# max/min compare values, so an unsigned type cannot be moved as its signed twin: widen instead.
_WIDEN = {torch.uint16: torch.int32, torch.uint32: torch.int64}


#: uint64 has no wider type: its order is int64's after flipping the sign bit (0 -> -2**63,
#: 2**64 - 1 -> 2**63 - 1), an involution.
_SIGN_BIT_64 = -2**63


def flip_sign_bit(t: torch.Tensor) -> torch.Tensor:
    """A new int64 tensor: ``t``'s 64-bit pattern (uint64 or int64) with the sign bit flipped, so
    comparing the results as int64 compares the originals as uint64."""
    return torch.bitwise_xor(t.view(torch.int64), _SIGN_BIT_64)


def _arith_dtype(dtype: torch.dtype, reduction: str) -> torch.dtype:
    """The dtype the scatter computes in: same bits where the reduction is bit-compatible."""
    if dtype == torch.bool:
        return torch.bool if reduction == "add" else torch.uint8   # add on bool is logical or
    if reduction in ("max", "min") and dtype in _WIDEN:
        return _WIDEN[dtype]
    return _MOVE_AS.get(dtype, dtype)


_WIDE = ((16, torch.complex128), (8, torch.int64), (4, torch.int32), (2, torch.int16))


def wide_rows(a: torch.Tensor, b: torch.Tensor):
    """Views of two contiguous ``[n, S]`` tensors with the widest element (up to 16 bytes) that
    tiles a row, for row copies: torch's index kernels move one element at a time, so 16-byte
    elements copy a 256-byte row ~2x faster than float32.  Pure data movement: the bits of any
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


#: Below this many updated elements one index_put_ call scatters: it wraps negative indices and
#: range-checks in C++, and torch runs it in one thread under its parallel grain size (32768),
#: in index order, so duplicates resolve to the last one and rows never mix.
SMALL_SCATTER = 16384


def scatter_nd_torch(dst: torch.Tensor, indices: torch.Tensor, updates: torch.Tensor,
                     lay: GatherLayout, reduction: str,
                     source: Optional[torch.Tensor] = None, fresh: bool = False,
                     op: str = "scatter_nd",
                     deterministic: Optional[bool] = None) -> torch.Tensor:
    """Scatter ``updates`` into ``dst`` in place; ``source`` (the input) is first copied into
    ``dst`` when given, else ``dst`` already holds it (the in-place variant).

    Every index is range-checked before anything is written, so a failing call leaves ``dst``
    as it was (it may be the caller's tensor: the in-place variant and ``out=``); a ``fresh``
    ``dst`` (a new tensor nobody else sees) may be written before the check completes.
    ``op`` names the caller in errors (``scatter_nd_`` for the in-place variant);
    ``deterministic`` (None: torch's deterministic mode) makes "none" keep exactly the last
    duplicate in index order.
    """
    k, sizes, n_tuples = lay.k, lay.index_sizes, lay.n_tuples
    if n_tuples == 0:
        return dst if source is None else dst.copy_(source)
    signed = indices.dtype in SIGNED_INDEX_DTYPES
    idx2 = index_matrix(indices, n_tuples, k, small=False)
    if 0 in sizes:
        _report_bad_index(op, indices, idx2, sizes, signed, lay.dim_names(dst.dim()))
    rows, slice_len = lay.rows, lay.slice_len      # no batch dims in a scatter: rows = prod(sizes)
    small = (n_tuples * slice_len <= SMALL_SCATTER and reduction in ("none", "add")
             and dst.dtype != torch.bool)
    if small:
        if fresh and slice_len != 0:   # index_put_ checks each dimension (unless nothing moves)
            if not signed and bool((idx2 < 0).any()):     # uint64 >= 2**63
                _report_bad_index(op, indices, idx2, sizes, signed, lay.dim_names(dst.dim()))
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
            _report_bad_index(op, indices, idx2, sizes, signed, lay.dim_names(dst.dim()))
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
    if reduction == "none":
        scatter_overwrite_rows(work2d, lin, upd, deterministic)
    elif reduction == "add":
        work2d.index_add_(0, lin, upd)
    else:
        work2d.scatter_reduce_(0, lin.unsqueeze(1).expand(n_tuples, slice_len), upd,
                               _REDUCE_OP[reduction], include_self=True)
    if flipped:
        work.bitwise_xor_(_SIGN_BIT_64)
    if not in_place:
        (dst.view(adt) if same_bits else dst).copy_(work.view(dst.shape))
    return dst


# ---------------------------------------------------------------------------------------------
# top_k1
# ---------------------------------------------------------------------------------------------

# torch.topk refuses these; move them to a type with the same order (values are exact).
# uint64 has no wider type: it is compared as int64 with the sign bit flipped (flip_sign_bit).
_TOPK_WORK = {torch.uint16: torch.int32, torch.uint32: torch.int64, torch.bool: torch.uint8}


def _nan_mask(t: torch.Tensor) -> Optional[torch.Tensor]:
    return torch.isnan(t) if t.is_floating_point() else None


#: Rows shorter than this always go to torch.topk directly (tests set it to 1: every row that
#: can be split is, whatever the cost model says).
CHUNKED_MIN_ROW = 256

# A cost model of the CPU kernels, in ns per row (fitted to timings with many rows; only the
# ratios matter).  torch.topk copies the row into (value, index) pairs, then selects by a heap
# when 64 * k <= n (cheap per element: most are rejected by one comparison with the heap's top,
# about k * log(n / k) are pushed), else by nth_element (several passes).
_TOPK_ROW, _TOPK_SCAN, _TOPK_PUSH, _TOPK_SELECT = 100.0, 1.3, 40.0, 6.0
# the strided chunk-max pass (vectorized), and building + gathering one candidate
_CHUNK_PASS, _CANDIDATE = 0.15, 2.3
# fixed cost of the chunked path's extra ops per call (ns), spread over the rows
_CHUNK_CALL = 60000.0


def _topk_cost(n: int, kk: int) -> float:
    if 64 * kk <= n:
        return _TOPK_ROW + _TOPK_SCAN * n + _TOPK_PUSH * kk * math.log(n / kk)
    return _TOPK_ROW + _TOPK_SELECT * n


#: Entries of ``_chunk_plan``'s cache.  One plan uses about log2(n) sub-plans (n >> j), so a
#: call never evicts its own; rows of many distinct lengths only recycle the oldest entries
#: (each ~200 bytes) instead of growing without bound.
CHUNK_PLAN_CACHE = 4096


@functools.lru_cache(maxsize=CHUNK_PLAN_CACHE)
def _chunk_plan(n: int, kk: int, rows: int, threads: int, min_row: int):
    """(cost, c): the cheapest way to select kk of n per the cost model, c = 1 meaning one
    torch.topk, else c strided chunks, themselves selected the cheapest way (recursively).

    torch.topk runs one row per thread, the chunk-max pass over all threads: with fewer rows
    than threads the row selections weigh more."""
    direct = _topk_cost(n, kk) * max(1.0, threads / rows)
    best = (direct, 1)
    if n < max(min_row, 2):
        return best
    for lc in range(1, n.bit_length()):
        c = 1 << lc
        m = n // c
        if m < kk:
            break
        sel = _chunk_plan(m, kk, rows, threads, min_row)[0]
        cand = kk * c + n - m * c
        cost = (_CHUNK_PASS * n + sel + _CHUNK_CALL / rows
                + (_topk_cost(cand, kk) + _CANDIDATE * cand) * max(1.0, threads / rows))
        if cost < best[0] or min_row == 1:
            best = (cost, c)
            if min_row == 1:              # forced (tests): the fewest chunks that split the row
                break
    return best


def _candidates(xw: torch.Tensor, kk: int, largest: bool, sort: bool = True):
    """The kk best values of each row (last dim), sorted if ``sort`` (ties in any order), and
    their indices.

    A row's head is viewed as c strided chunks, chunk j = {j, j + m, j + 2m, ...}: the chunk
    maxima (minima) are the elementwise max of c contiguous vectors of length m, one vectorized
    streaming pass.  The kk chunks with the best maxima are selected (the same way, recursively,
    or by torch.topk), and torch.topk runs over just those kk*c elements (plus the tail).  That
    set holds the top-kk multiset: every element strictly better than the kk-th best chunk max
    M lies in a chosen chunk, and each of the kk chosen chunks holds a distinct element at least
    as good as M, so the row's kk-th best value is at least M.  It trades torch.topk's per-row
    selection over n (a copy into (value, index) pairs and an nth_element or a heap) for one
    vectorized pass and selections over about 2*sqrt(n*kk) elements; ``_chunk_plan`` decides.
    """
    n = xw.shape[-1]
    rows = 1 << ((xw.numel() // n).bit_length() - 1)          # a power of two: a small cache
    c = _chunk_plan(n, kk, rows, torch.get_num_threads(), CHUNKED_MIN_ROW)[1]
    if c > 1:
        m = n // c
        head = xw[..., : m * c].unflatten(-1, (c, m))          # a view, whatever the strides
        best = head.amax(-2) if largest else head.amin(-2)    # [..., m]
        # amin propagates NaN, which sorts greatest: a NaN chunk would crowd out a real one
        if largest or not best.is_floating_point() or not bool(torch.isnan(best).any()):
            cid = _candidates(best, kk, largest, sort=False)[1]
            cidx = (cid.unsqueeze(-1) + torch.arange(0, m * c, m, device=xw.device)).flatten(-2)
            if m * c < n:
                tail = torch.arange(m * c, n, device=xw.device).expand(xw.shape[:-1] + (n - m * c,))
                cidx = torch.cat([cidx, tail], dim=-1)
            v, p = torch.topk(xw.gather(-1, cidx), kk, dim=-1, largest=largest, sorted=sort)
            return v, cidx.gather(-1, p)
    return torch.topk(xw, kk, dim=-1, largest=largest, sorted=sort)


#: Rows at least this long take the best element through strided chunk maxima (``_top1``).
TOP1_MIN_ROW = 512


def _top1_direct(xw: torch.Tensor, largest: bool):
    """k = 1 by torch.max / torch.min, which return the first index among equal extremes
    (documented), max ranking NaN greatest like torch.sort; min would return NaN, so rows with
    one go through the general path."""
    vals, idx = (xw.max(-1, keepdim=True) if largest else xw.min(-1, keepdim=True))
    if largest or not xw.is_floating_point():
        return vals, idx
    nan = torch.isnan(vals).squeeze(-1)
    if bool(nan.any()):
        vals[nan], idx[nan] = _stable_topk(xw[nan], 1, largest)
    return vals, idx


def _top1(xw: torch.Tensor, largest: bool):
    """k = 1: the best value of each row and its first index.

    torch.max with indices is a slow per-row loop; the plain max reduction is vectorized.  The
    head is viewed as c strided chunks as in ``_candidates``; the first best chunk maximum (over
    m values) names the chunk j, and the first best element of that chunk (c values) the index.
    That is the row's first best element unless the best value is also in another chunk (it
    could come earlier there), in the tail, or is NaN: those rows are redone by
    ``_top1_direct``.
    """
    n = xw.shape[-1]
    c = 1 << max(0, round(math.log2(math.sqrt(n))))
    m = n // c
    if n < TOP1_MIN_ROW or c < 2:
        return _top1_direct(xw, largest)
    head = xw[..., : m * c].unflatten(-1, (c, m))
    best = head.amax(-2) if largest else head.amin(-2)        # [..., m]
    v, j = best.max(-1, keepdim=True) if largest else best.min(-1, keepdim=True)
    cand = xw.gather(-1, j + torch.arange(0, m * c, m, device=xw.device))     # chunk j: [..., c]
    i = (cand == v).to(torch.uint8).argmax(-1, keepdim=True)    # the first of them
    idx = j + i * m
    odd = (best == v).sum(-1, keepdim=True, dtype=torch.int32) != 1    # NaN: 0
    if m * c < n:
        tail = xw[..., m * c:]
        tb = tail.amax(-1, keepdim=True) if largest else tail.amin(-1, keepdim=True)
        odd |= ~(tb < v) if largest else ~(tb > v)            # at least as good, or NaN
    odd = odd.squeeze(-1)
    if bool(odd.any()):
        if bool(odd.all()):
            return _top1_direct(xw, largest)
        v[odd], idx[odd] = _top1_direct(xw[odd], largest)
    return v, idx


def _ties(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise "equal in the sort order": NaN ties with NaN, -0.0 with +0.0."""
    eq = a == b
    if a.is_floating_point():
        eq = eq | (torch.isnan(a) & torch.isnan(b))
    return eq


def _lexsort(vals: torch.Tensor, idx: torch.Tensor, largest: bool):
    """Sort k (value, index) pairs by value in the direction, then by ascending index."""
    idx, p = torch.sort(idx, dim=-1, stable=True)
    vals = vals.gather(-1, p)
    vals, p = torch.sort(vals, dim=-1, descending=largest, stable=True)
    return vals, idx.gather(-1, p)


def _order_ties(vals: torch.Tensor, idx: torch.Tensor, largest: bool):
    """Among equal values put the lower index first (the values are already sorted); only the
    rows that hold a tie are sorted again."""
    if vals.shape[-1] < 2:
        return vals, idx
    rows = _ties(vals[..., 1:], vals[..., :-1]).any(-1)
    if not bool(rows.any()):
        return vals, idx
    if bool(rows.all()):
        return _lexsort(vals, idx, largest)
    # in place: the callers pass their own temporaries (a copy of [rows, k] is not free)
    vals[rows], idx[rows] = _lexsort(vals[rows], idx[rows], largest)
    return vals, idx


def _boundary_fix(xw: torch.Tensor, vals: torch.Tensor, k: int, largest: bool) -> torch.Tensor:
    """Rows of ``xw`` ([m, n]) whose k-th boundary value also occurs outside the selection:
    choose the boundary ties with the lowest indices.  Returns the k indices in index order.

    ``vals`` are the rows' k selected values (sorted); a prefix count over the row ranks the
    boundary ties, and a scatter compacts the chosen positions (O(n) passes and memory).
    """
    t = vals[..., k - 1:k]
    t_nan = _nan_mask(t)
    eq = _ties(xw, t)
    if largest:
        better = xw > t
        if t_nan is not None:
            better = better | (torch.isnan(xw) & ~t_nan)
    else:
        better = xw < t
        if t_nan is not None:
            better = better | (~torch.isnan(xw) & t_nan)
    need = _ties(vals, t).sum(-1, keepdim=True, dtype=torch.int32)
    last = _nth_true(eq, need)
    ar = torch.arange(xw.shape[-1], device=xw.device)
    chosen = better | (eq & (ar <= last))
    # exactly k per row, so the row-major positions of the chosen elements reshape to [m, k]
    return chosen.nonzero()[:, -1].reshape(xw.shape[:-1] + (k,))


def _nth_true(mask: torch.Tensor, nth: torch.Tensor) -> torch.Tensor:
    """Position of the ``nth`` (>= 1, [..., 1]) True of every row of ``mask``.

    Two levels instead of a prefix sum over the whole row (sequential per row in torch): count
    per chunk (a parallel reduction), prefix-sum the counts, find the chunk, prefix-sum within it.
    """
    n = mask.shape[-1]
    c = max(16, int(math.sqrt(n)))
    m = -(-n // c)
    lead = mask.shape[:-1]
    mp = torch.nn.functional.pad(mask.reshape(-1, n), (0, m * c - n)).view(-1, m, c)
    nth = nth.reshape(-1, 1).to(torch.int32)
    cnt = mp.sum(-1, dtype=torch.int32)                            # [rows, m]
    ccum = cnt.cumsum(-1, dtype=torch.int32)
    j = torch.searchsorted(ccum, nth)                               # chunk holding the nth
    j = j.clamp_(max=m - 1)
    before = ccum.gather(-1, j) - cnt.gather(-1, j)
    inner = mp.gather(1, j.unsqueeze(-1).expand(-1, 1, c)).squeeze(1).cumsum(-1, dtype=torch.int32)
    pos = torch.searchsorted(inner, nth - before)
    return (j * c + pos).reshape(lead + (1,))


def stable_topk_lastdim(xw: torch.Tensor, k: int, largest: bool):
    """The k best of each row (last dim) in DirectML's order: by value (NaN greatest, -0.0 ==
    +0.0), ties by lower index, the k-th boundary's ties resolved to the lowest indices."""
    if k == 1:
        return _top1(xw, largest)
    return _stable_topk(xw, k, largest)


def _stable_topk(xw: torch.Tensor, k: int, largest: bool):
    """``stable_topk_lastdim`` for any k.

    One selection of k+1 gives the right multiset of values, and says which rows have a tie
    across the k-th boundary (the (k+1)-th value equals the k-th).  Rows without one only need
    the order of ties inside the k fixed (two stable sorts of k elements); rows with one choose
    their boundary ties by a prefix count (``_boundary_fix``).  Never a full sort, unless k is
    the row length.
    """
    n = xw.shape[-1]
    kk = min(k + 1, n)
    vals, idx = _candidates(xw, kk, largest)
    # The common case in one comparison: every row strictly ordered (no tie inside the k, none
    # across the boundary).  NaN fails both comparisons, so rows with one take the long way.
    strict = vals[..., :-1] > vals[..., 1:] if largest else vals[..., :-1] < vals[..., 1:]
    if bool(strict.all()):
        return vals[..., :k], idx[..., :k]
    if kk > k:
        cross = _ties(vals[..., k], vals[..., k - 1])         # [rows...]
        vals, idx = vals[..., :k], idx[..., :k]
        if bool(cross.any()):
            if bool(cross.all()):
                idx = _boundary_ties(xw.reshape(-1, n), vals.reshape(-1, k), idx.reshape(-1, k),
                                     k, largest).view(idx.shape)
            else:
                idx[cross] = _boundary_ties(xw[cross], vals[cross], idx[cross], k, largest)
            return _lexsort(xw.gather(-1, idx), idx, largest)
    return _order_ties(vals, idx, largest)


#: The lowest-indexed boundary ties are first looked for in the leading
#: max(TIE_PREFIX, TIE_PREFIX_PER_K * k) elements of a row.
TIE_PREFIX = 256
TIE_PREFIX_PER_K = 32


def _boundary_ties(x2: torch.Tensor, vals: torch.Tensor, idx: torch.Tensor, k: int,
                   largest: bool) -> torch.Tensor:
    """Rows ([m, n]) with a tie across the k-th boundary: keep the strictly better elements that
    torch.topk found (their indices are exact) and take the boundary value's lowest indices.

    Those usually sit near the start of the row, so they are first looked for in a prefix of the
    row (a few light passes over ``m x TIE_PREFIX``); rows whose prefix holds too few go through
    the whole-row ``_boundary_fix``.
    """
    m, n = x2.shape
    t = vals[:, k - 1:k]
    need = _ties(vals, t).sum(-1, dtype=torch.int32)                # [m] boundary ties to take
    length = min(n, max(TIE_PREFIX, TIE_PREFIX_PER_K * k))
    eq = _ties(x2[:, :length], t)
    cnt = eq.sum(-1, dtype=torch.int32)
    short = cnt < need
    out = idx.clone()
    if bool(short.any()):
        if bool(short.all()):
            return _boundary_fix(x2, vals, k, largest)
        out[short] = _boundary_fix(x2[short], vals[short], k, largest)
        need = torch.where(short, 0, need)    # those rows take nothing below
    nz = eq.nonzero()                     # row-major: ascending rows, ascending columns
    r, col = nz[:, 0], nz[:, 1]
    start = cnt.cumsum(0) - cnt           # first entry of each row in nz
    j = torch.arange(r.numel(), device=x2.device) - start.index_select(0, r)
    keep = j < need.index_select(0, r)    # the row's first `need` boundary ties
    r, col, j = r[keep], col[keep], j[keep]
    out[r, (k - need).index_select(0, r) + j] = col
    return out


def top_k1_torch(input: torch.Tensor, k: int, axis: int, largest: bool,
                 index_dtype: torch.dtype):
    """Stable top-k with torch ops: values and indices, laid out like ``input`` with ``k`` along
    ``axis``."""
    xm = input.movedim(axis, -1)
    work = _TOPK_WORK.get(input.dtype)
    if input.dtype == torch.uint64:
        xw = flip_sign_bit(xm)
    else:
        xw = xm.to(work) if work is not None else xm
    if input.numel() == 0:
        shape = xm.shape[:-1] + (k,)
        vals = torch.empty(shape, dtype=input.dtype, device=input.device)
        idx = torch.empty(shape, dtype=index_dtype, device=input.device)
    else:
        _, idx = stable_topk_lastdim(xw, k, largest)
        # values straight from the input: exact bits (torch.topk may canonicalize NaNs)
        vals = as_bits(xm).gather(-1, idx).view(input.dtype)
        idx = idx.to(index_dtype)
    return (vals.movedim(-1, axis).contiguous(), idx.movedim(-1, axis).contiguous())
