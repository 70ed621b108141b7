"""ctypes wrappers of the native gather_nd / scatter_nd kernels (``csrc/gather_scatter.c``).

Each function returns ``None`` when the kernel does not cover the call; the caller then runs the
portable path.  Covered: contiguous input (gather) / destination (scatter; else a contiguous
work copy), any data dtype for gathers and ``reduction="none"``, the reductions on float32,
float64, the 8-64-bit integers, uint16, uint32, uint64 (unsigned wraparound and order) and
bool.  Delegated: a non-contiguous gather input (advanced indexing reads it through its strides,
no copy), and float16 / bfloat16 / other dtypes with a reduction (torch rounds those per
operation in its own way).

Errors are raised through ``raise_index_error`` with the position the portable path's
``first_bad_position`` reports (the smallest flat position of a bad coordinate), so the messages
are identical.  Nothing the caller owns is written before every index is checked: a gather into
``out=`` runs a check-only pass (it reads only the indices) before the copy; a scatter checks and
linearizes all tuples before its first write.

The callers (the ops' kernels) have checked that every tensor lies inside its storage
(``_validation.check_storage``), for every backend.
"""
from __future__ import annotations

import functools
from array import array
from typing import Optional

import torch

from . import _native
from ._forms import GatherLayout
from ._validation import SIGNED_INDEX_DTYPES, raise_index_error

#: Minimum work per thread (about one tuple plus one 64-byte line of slice each): calls below it
#: run on the calling thread alone, without a thread start (~30 us).  Tests lower it.
GRAIN = 1 << 15

_NO_ERROR = 2**63 - 1

#: Data dtypes of a native reduction (``D_*`` in gather_scatter.c).
_DATA_CODES = {torch.float32: 0, torch.float64: 1, torch.int8: 2, torch.int16: 3, torch.int32: 4,
               torch.int64: 5, torch.uint8: 6, torch.uint16: 7, torch.uint32: 8, torch.bool: 9,
               torch.uint64: 10}
_RED_CODES = {"none": 0, "add": 1, "mul": 2, "max": 3, "min": 4}


@functools.lru_cache(maxsize=None)
def _fns():
    """(gather, scatter): the ctypes functions.  Each takes one pointer to a packed int64
    argument array (see gather_scatter.c): one argument conversion per call."""
    lib = _native.lib()
    fns = (lib.tdo_gather_nd, lib.tdo_scatter_nd)
    for f, res in zip(fns, (_native.c_i64, _native.c_i64)):
        f.argtypes = [_native.c_ptr]
        f.restype = res
    return fns


@functools.lru_cache(maxsize=1024)
def _dims(sizes: tuple) -> list:
    """The k index sizes followed by the row strides of the indexed dims."""
    k = len(sizes)
    strides = [1] * k
    for j in range(k - 2, -1, -1):
        strides[j] = strides[j + 1] * sizes[j + 1]
    return list(sizes) + strides


def _call(fn, args: list) -> int:
    # The array lives until the call returns; the kernel only reads it.
    a = array("q", args)
    return fn(a.buffer_info()[0])


def _raise(op: str, indices: torch.Tensor, pos: int, lay: GatherLayout, rank: int) -> None:
    raise_index_error(op, indices, pos, indices.shape, lay.index_sizes, lay.dim_names(rank),
                      indices.dtype in SIGNED_INDEX_DTYPES, lay.k)


#: Per (layout, data dtype, index dtype): the constant part of a gather's kernel arguments
#: (pointers, threads and grain are set per call) and the byte counts of the storage check.
#: Layouts are memoized by the validation layer, so a repeated call finds its plan by the
#: layout's identity.
_PLANS: dict = {}


def _gather_plan(lay: GatherLayout, input: torch.Tensor, indices: torch.Tensor) -> Optional[tuple]:
    """(layout, args, row_bytes); None when the index dtype is not covered."""
    code = _native.INDEX_CODES.get(indices.dtype)
    if code is None:
        return None
    n = lay.n_tuples
    es = input.element_size()
    row_bytes = lay.slice_len * es
    # [out, src, idx, idx_dtype, n, k, per_batch, rows_per_batch, row_bytes, copy, threads,
    #  grain, sizes..., strides...]
    batch = lay.batch or 1             # an empty batch: n == 0, the kernel is not called
    args = [0, 0, 0, code, n, lay.k, n // batch, lay.rows // batch, row_bytes, 0, 1,
            1] + _dims(lay.index_sizes)
    if len(_PLANS) > 4096:
        _PLANS.clear()
    plan = _PLANS[(id(lay), input.dtype, indices.dtype)] = (lay, args, row_bytes)
    return plan


def gather_nd_native(input: torch.Tensor, indices: torch.Tensor, lay: GatherLayout,
                     out: Optional[torch.Tensor] = None) -> Optional[torch.Tensor]:
    """gather_nd into ``out`` (or a new tensor); None when not covered (non-contiguous input)."""
    plan = _PLANS.get((id(lay), input.dtype, indices.dtype))
    if plan is None or plan[0] is not lay:
        plan = _gather_plan(lay, input, indices)
    if plan is None or not input.is_contiguous():
        return None                    # an index dtype the kernel does not read, or strides
    _, args, row_bytes = plan
    idx_contiguous = indices.is_contiguous()
    n = lay.n_tuples
    if n == 0:
        return torch.empty(lay.out_shape, dtype=input.dtype) if out is None else out
    idx = indices if idx_contiguous else indices.contiguous()
    args = args.copy()
    args[2], args[10] = idx.data_ptr(), _native.threads()
    args[11] = max(1, GRAIN // (1 + row_bytes // 64))
    gather = _fns()[0]
    target = out
    if out is not None:
        # Check-only pass first: out= must stay untouched when an index is bad.
        bad = _call(gather, args)
        if bad != _NO_ERROR:
            _raise("gather_nd", indices, bad, lay, input.dim())
        if not out.is_contiguous():
            target = None
    if target is None:
        target = _native.empty(lay.out_shape, input.dtype, n * row_bytes)
    if row_bytes:
        args[0], args[1], args[9] = target.data_ptr(), input.data_ptr(), 1
    if out is None or row_bytes:
        bad = _call(gather, args)
        if bad != _NO_ERROR:
            _raise("gather_nd", indices, bad, lay, input.dim())
    if out is not None and target is not out:
        out.copy_(target)
        return out
    return target


def scatter_covers(dtype: torch.dtype, reduction: str) -> bool:
    """Whether the native scatter computes this dtype x reduction bit-exactly."""
    return reduction == "none" or dtype in _DATA_CODES


#: Per (layout, data dtype, index dtype, reduction): what a scatter's arguments and checks need
#: of them (see _scatter_plan), computed once: small in-place scatters (KV-cache updates) are a
#: hot path.
_SCATTER_PLANS: dict = {}


def _scatter_plan(lay: GatherLayout, dst: torch.Tensor, indices: torch.Tensor,
                  reduction: str) -> tuple:
    """(layout, covered, args template, input bytes, row_bytes // 64 + 1, input bytes // 64,
    whether the element overwrite may split tuples among threads)."""
    es = dst.element_size()
    n, slice_len = lay.n_tuples, lay.slice_len
    row_bytes = slice_len * es
    code = _native.INDEX_CODES.get(indices.dtype)
    covered = scatter_covers(dst.dtype, reduction) and code is not None
    # [work, init, upd, idx, idx_dtype, n, k, n_rows, row_bytes, slice_len, dtype, red, parts,
    #  nthreads, grain, split, sizes..., strides...]
    args = [0, 0, 0, 0, code or 0, n, lay.k, lay.rows, row_bytes, slice_len,
            _DATA_CODES.get(dst.dtype, 0), _RED_CODES[reduction], 0, 0, 0, 0]
    args += _dims(lay.index_sizes)
    split_ok = reduction == "none" and slice_len == 1 and row_bytes in (1, 2, 4, 8)
    if len(_SCATTER_PLANS) > 4096:
        _SCATTER_PLANS.clear()
    plan = _SCATTER_PLANS[(id(lay), dst.dtype, indices.dtype, reduction)] = (
        lay, covered, args, lay.rows * row_bytes, 1 + row_bytes // 64, lay.rows * row_bytes // 64,
        split_ok)
    return plan


def scatter_nd_native(dst: torch.Tensor, source: Optional[torch.Tensor], indices: torch.Tensor,
                      updates: torch.Tensor, lay: GatherLayout, reduction: str,
                      op: str, deterministic: bool) -> bool:
    """Check every index, copy ``source`` into ``dst`` (unless None), then scatter ``updates``
    (last duplicate wins for "none"; reductions in index order).  False (nothing done) when not
    covered.  One kernel call checks all tuples before it writes anything, so a failing call
    leaves ``dst`` (the caller's in-place input or out=) untouched.  ``op`` names the caller in
    errors; ``deterministic``: the last duplicate in index order wins for "none" (otherwise an
    element overwrite may split its tuples among threads and keep any one duplicate)."""
    plan = _SCATTER_PLANS.get((id(lay), dst.dtype, indices.dtype, reduction))
    if plan is None or plan[0] is not lay:
        plan = _scatter_plan(lay, dst, indices, reduction)
    _, covered, args, input_bytes, row_units, init_units, split_ok = plan
    if not covered:
        return False
    dst_contiguous = dst.is_contiguous()
    src_contiguous = source is None or source.is_contiguous()
    idx_contiguous, upd_contiguous = indices.is_contiguous(), updates.is_contiguous()
    n = lay.n_tuples
    if n == 0:
        if source is not None:
            dst.copy_(source)
        return True
    idx = indices if idx_contiguous else indices.contiguous()
    init = source
    if dst_contiguous:
        work = dst
        if not src_contiguous:
            init = source.contiguous()     # copied into dst only after the check
    else:
        # A contiguous work copy, written back after a successful scatter.
        work = (source if source is not None else dst).contiguous()
        if work is source:
            work = work.clone()
        init = None
    upd = updates if upd_contiguous else updates.contiguous()
    nthreads = _native.threads()
    # Threads: every one scans all n row numbers, so more threads pay only with enough writes.
    work_units = n * row_units + (init_units if init is not None else 0)
    parts = max(1, min(nthreads, work_units // GRAIN))
    if input_bytes == 0:
        init, parts = None, 0          # check only (nothing to write); the copy below
    # Element overwrites outside deterministic mode: tuples split among threads (any one
    # duplicate may win, as on the portable path); otherwise destination rows are partitioned
    # (the last duplicate wins, rows never mix).
    split = int(split_ok and not deterministic)
    args = args.copy()
    args[0], args[1], args[2], args[3] = (work.data_ptr(), 0 if init is None else init.data_ptr(),
                                          upd.data_ptr(), idx.data_ptr())
    args[12], args[13], args[14], args[15] = parts, nthreads, max(1, GRAIN // 2), split
    bad = _call(_fns()[1], args)
    if bad == -1:
        raise MemoryError(f"{op}: cannot allocate {8 * n} bytes of row numbers")
    if bad != _NO_ERROR:
        _raise(op, indices, bad, lay, dst.dim())
    if parts == 0 and source is not None:
        dst.copy_(source)
    elif work is not dst:
        dst.copy_(work)
    return True
