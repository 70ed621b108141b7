"""top_k1 on the portable path: a stable top-k from ``torch.topk`` candidates plus an explicit
tie order (lower index first), chunked for long rows."""
from __future__ import annotations

import functools
import math
from typing import Optional

import torch

from .._checks import check_storages, check_top_k1, resolved
from ._common import as_bits, flip_sign_bit

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
    key = vals
    if vals.is_floating_point():
        # one NaN and one zero: CUDA's sort orders -NaN after NaN and -0.0 before 0.0, which
        # are ties here (the values keep their own bits)
        key = torch.where(torch.isnan(vals), float("nan"), vals + 0.0)
    p = torch.sort(key, dim=-1, descending=largest, stable=True).indices
    return vals.gather(-1, p), idx.gather(-1, p)


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


# ---------------------------------------------------------------------------------------------
# The op kernel (the schema's arguments): validate, then compute.  Shared with the Triton
# backend, which passes its own ``compute``.
# ---------------------------------------------------------------------------------------------

def make_kernels(compute) -> dict:
    """The ``top_k1`` kernel around ``compute(input, k, axis, largest, index_dtype) -> (values,
    indices)`` (axis non-negative, input validated, negative bit resolved)."""

    def top_k1(input, k, axis=-1, direction="decreasing", index_dtype=None,
               feature_level="permissive"):
        index_dtype = torch.int64 if index_dtype is None else index_dtype
        ax = check_top_k1(input, k, axis, direction, index_dtype, feature_level)
        check_storages("top_k1", ("InputTensor", input))
        return compute(resolved(input), k, ax, direction == "decreasing", index_dtype)

    return {"top_k1": top_k1}


KERNELS = make_kernels(top_k1_torch)
