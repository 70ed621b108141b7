"""top_k1 on the native CPU kernel (``csrc/topk.c``, ``tdo_top_k1``).

The input is seen as ``[outer, n, inner]`` with ``n`` the axis.  The kernel wants rows contiguous
along the axis: a contiguous input with the axis last goes as it is; anything else is first
copied by ``movedim(axis, -1).contiguous()`` (torch's transposing copy, faster than strided reads
along the axis).  The kernel writes the values and indices straight into the final
``[outer, k, inner]`` outputs, in the requested index dtype, so there is no pass after it.
"""
from __future__ import annotations

import math
from typing import Tuple

import torch

from . import _native
from ._native import c_i64, c_int, c_ptr

#: Data dtypes as the C side numbers them (``D_F32`` ... in topk.c).
DTYPE_CODES = {
    torch.float32: 0, torch.float16: 1, torch.bfloat16: 2, torch.float64: 3, torch.int64: 4,
    torch.int32: 5, torch.int16: 6, torch.int8: 7, torch.uint8: 8, torch.uint16: 9,
    torch.uint32: 10, torch.bool: 11, torch.uint64: 12,
}
_WIDE = (torch.float64, torch.int64, torch.uint64)   # 64-bit keys: any row length

#: Work one thread gets at least, in element-steps (a row of n counts n for k == 1, 4n for the
#: selections): calls below ~2x this run on the calling thread (a thread start costs ~20-50 us,
#: about as much as this many steps).
GRAIN = 1 << 15
#: When there are fewer rows than threads, rows of at least 2 * SEG_MIN elements are split into
#: segments (>= SEG_MIN each) whose candidates are merged.
SEG_MIN = 1 << 15
#: The candidate buffer holds k + max(k, CAP_MIN) entries (fewer selections for small k).
CAP_MIN = 64

_fn = None


def _kernel():
    """The ctypes function, typed once (per-call overhead matters for small calls)."""
    global _fn
    if _fn is None:
        f = _native.lib().tdo_top_k1
        f.argtypes = [c_ptr, c_int, c_i64, c_i64, c_i64, c_i64, c_int, c_ptr, c_ptr, c_int,
                      c_int, c_i64, c_i64, c_i64]
        f.restype = c_int
        _fn = f
    return _fn


def supports(input: torch.Tensor, k: int, axis: int) -> bool:
    """Whether the kernel covers the call (every dtype and index dtype of top_k1; 32-bit-key
    dtypes need rows shorter than 2**32, the index half of their composite keys)."""
    if input.dtype not in DTYPE_CODES:
        return False
    return input.dtype in _WIDE or input.shape[axis] < 2 ** 32


def top_k1_native(input: torch.Tensor, k: int, axis: int, largest: bool,
                  index_dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    """Stable top-k of ``input`` along ``axis`` (non-negative, validated): ``(values, indices)``,
    contiguous, ``input``'s shape with ``k`` along ``axis``."""
    contiguous = input.is_contiguous()
    shape = list(input.shape)
    n = shape[axis]
    inner = math.prod(shape[axis + 1:])
    out_shape = shape.copy()
    out_shape[axis] = k
    values = _native.empty(out_shape, input.dtype)
    indices = _native.empty(out_shape, index_dtype)
    if values.numel() == 0:
        return values, indices
    if inner == 1 and contiguous:
        x = input
    else:
        x = input.movedim(axis, -1).contiguous()
    rows = input.numel() // n
    rc = _kernel()(x.data_ptr(), DTYPE_CODES[input.dtype], rows, n, inner, k, int(largest),
                   values.data_ptr(), indices.data_ptr(), _native.INDEX_CODES[index_dtype],
                   _native.threads(), GRAIN, SEG_MIN, CAP_MIN)
    if rc != 0:
        raise MemoryError("top_k1: the native kernel could not allocate its work buffers")
    return values, indices
