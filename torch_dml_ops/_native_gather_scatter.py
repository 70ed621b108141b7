"""ctypes wrappers of the native gather_nd / scatter_nd kernels (``csrc/gather_scatter.c``).

Each function returns ``None`` when the kernel does not cover the call; the caller then runs the
portable path.  Covered: contiguous input (gather) / destination (scatter; else a contiguous
work copy), any data dtype for gathers and ``reduction="none"``, the reductions on float32,
float64, the 8-64-bit integers, uint16, uint32 and bool.  Delegated: a non-contiguous gather
input (advanced indexing reads it through its strides, no copy), and float16 / bfloat16 / other
dtypes with a reduction (torch rounds those per operation in its own way).

Errors are raised through ``raise_index_error`` with the position the portable path's
``first_bad_position`` reports (the smallest flat position of a bad coordinate), so the messages
are identical.  Nothing the caller owns is written before every index is checked: a gather into
``out=`` runs a check-only pass (it reads only the indices) before the copy; a scatter checks and
linearizes all tuples before its first write.
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
               torch.int64: 5, torch.uint8: 6, torch.uint16: 7, torch.uint32: 8, torch.bool: 9}
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


def _indices(indices: torch.Tensor) -> torch.Tensor:
    return indices if indices.is_contiguous() else indices.contiguous()


def _raise(op: str, indices: torch.Tensor, pos: int, lay: GatherLayout, rank: int) -> None:
    raise_index_error(op, indices, pos, indices.shape, lay.index_sizes, lay.dim_names(rank),
                      indices.dtype in SIGNED_INDEX_DTYPES, lay.k)


#: Per (layout, dtype): the constant part of a gather's kernel arguments (threads and grain
#: are set per call).  Layouts are memoized
#: by the validation layer, so a repeated call finds its plan by the layout's identity.
_PLANS: dict = {}


def _gather_plan(lay: GatherLayout, dtype: torch.dtype, element_size: int) -> tuple:
    n = lay.n_tuples
    row_bytes = lay.slice_len * element_size
    # [out, src, idx, dtype, n, k, per_batch, rows_per_batch, row_bytes, copy, threads, grain,
    #  sizes..., strides...]
    args = [0, 0, 0, 0, n, lay.k, n // lay.batch, lay.rows // lay.batch, row_bytes, 0, 1,
            1] + _dims(lay.index_sizes)
    if len(_PLANS) > 4096:
        _PLANS.clear()
    plan = _PLANS[(id(lay), dtype)] = (lay, args, row_bytes)
    return plan


def gather_nd_native(input: torch.Tensor, indices: torch.Tensor, lay: GatherLayout,
                     out: Optional[torch.Tensor] = None) -> Optional[torch.Tensor]:
    """gather_nd into ``out`` (or a new tensor); None when not covered (non-contiguous input)."""
    code = _native.INDEX_CODES.get(indices.dtype)
    if code is None or not input.is_contiguous():
        return None
    n = lay.n_tuples
    if n == 0:
        return torch.empty(lay.out_shape, dtype=input.dtype) if out is None else out
    idx = _indices(indices)
    plan = _PLANS.get((id(lay), input.dtype))
    if plan is None or plan[0] is not lay:
        plan = _gather_plan(lay, input.dtype, input.element_size())
    _, args, row_bytes = plan
    args = args.copy()
    args[2], args[3], args[10] = idx.data_ptr(), code, _native.threads()
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
        target = _native.empty(lay.out_shape, input.dtype)
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


def scatter_nd_native(dst: torch.Tensor, source: Optional[torch.Tensor], indices: torch.Tensor,
                      updates: torch.Tensor, lay: GatherLayout, reduction: str) -> bool:
    """Check every index, copy ``source`` into ``dst`` (unless None), then scatter ``updates``
    (last duplicate wins for "none"; reductions in index order).  False (nothing done) when not
    covered.  One kernel call checks all tuples before it writes anything, so a failing call
    leaves ``dst`` (the caller's in-place input or out=) untouched."""
    if not scatter_covers(dst.dtype, reduction) or indices.dtype not in _native.INDEX_CODES:
        return False
    n = lay.n_tuples
    if n == 0:
        if source is not None:
            dst.copy_(source)
        return True
    idx = _indices(indices)
    slice_len = lay.slice_len
    row_bytes = slice_len * dst.element_size()
    init = source
    if dst.is_contiguous():
        work = dst
        if source is not None and not source.is_contiguous():
            init = source.contiguous()     # copied into dst only after the check
    else:
        # A contiguous work copy, written back after a successful scatter.
        work = (source if source is not None else dst).contiguous()
        if work is source:
            work = work.clone()
        init = None
    upd = updates if updates.is_contiguous() else updates.contiguous()
    nthreads = _native.threads()
    # Threads: every one scans all n row numbers, so more threads pay only with enough writes.
    work_units = n * (1 + row_bytes // 64) + (lay.rows * row_bytes // 64 if init is not None
                                                else 0)
    parts = max(1, min(nthreads, work_units // GRAIN))
    if lay.rows * row_bytes == 0:
        init, parts = None, 0          # check only (nothing to write); the copy below
    # Element overwrites outside deterministic mode: tuples split among threads (any one
    # duplicate may win, as on the portable path); otherwise destination rows are partitioned
    # (the last duplicate wins, rows never mix).
    split = int(reduction == "none" and slice_len == 1 and row_bytes in (1, 2, 4, 8)
                and not torch.are_deterministic_algorithms_enabled())
    args = [work.data_ptr(), 0 if init is None else init.data_ptr(), upd.data_ptr(),
            idx.data_ptr(), _native.INDEX_CODES[idx.dtype], n, lay.k, lay.rows, row_bytes,
            slice_len, _DATA_CODES.get(dst.dtype, 0), _RED_CODES[reduction], parts, nthreads,
            max(1, GRAIN // 2), split] + _dims(lay.index_sizes)
    bad = _call(_fns()[1], args)
    if bad == -1:
        raise MemoryError(f"scatter_nd: cannot allocate {8 * n} bytes of row numbers")
    if bad != _NO_ERROR:
        _raise("scatter_nd", indices, bad, lay, dst.dim())
    if parts == 0 and source is not None:
        dst.copy_(source)
    elif work is not dst:
        dst.copy_(work)
    return True
