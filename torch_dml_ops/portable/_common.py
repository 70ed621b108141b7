"""Shared helpers of the portable path (torch ops only): moving unsigned and floating data as
same-width integers, index tuples as a matrix, the index-range check, tuple linearization.

Every portable kernel receives tensors that passed the metadata checks of ``_checks`` and the
layout of ``_forms``, and does the data-dependent index-range check itself: one min/max pass and a
host sync, or the bounds check of the torch kernel it calls.  The portable path always runs that
check (the same pass tells it whether negative indices must wrap); with ``check_indices=False`` a
bad tuple it finds is not an error: the call is redone without it (:func:`in_range`), zeros for
its slice (gather) or no write (scatter), as on every backend.
"""
from __future__ import annotations

import math
from typing import List, Sequence

import torch

from .._checks import raise_index_error
from .._tables import bits_view


# torch's index kernels refuse the unsigned types: move them as same-width signed integers (the
# gather is a bit-exact copy, so the reinterpretation is lossless).
MOVE_AS = {torch.uint16: torch.int16, torch.uint32: torch.int32, torch.uint64: torch.int64}


def as_movable(t: torch.Tensor) -> torch.Tensor:
    alias = MOVE_AS.get(t.dtype)
    return t if alias is None else t.view(alias)


# Pure moves go through the same-width signed integer type (_tables.bits_view): bit-exact for
# every dtype.
as_bits = bits_view


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


def torch_checks_bounds(t: torch.Tensor) -> bool:
    """Whether torch's indexing kernels on ``t``'s device report an out-of-range index as an
    ``IndexError`` the portable path can catch: on CPU only.  On CUDA (and other accelerators)
    they fail a device-side assert, which poisons the context, so there every index is
    range-checked first (one reduction and one host read) and the shortcuts that leave the
    check to torch's kernel are not taken."""
    return t.device.type == "cpu"


def _out_of_range(idx2: torch.Tensor, sizes: Sequence[int], signed: bool) -> torch.Tensor:
    """Bool, shaped as the index matrix: which coordinates are out of range (a uint64 of 2**63
    or more reads negative in ``idx2``: out of range)."""
    size_t = torch.tensor(list(sizes), dtype=idx2.dtype, device=idx2.device)
    lo = -size_t if signed else torch.zeros_like(size_t)
    return (idx2 < lo) | (idx2 >= size_t)


def first_bad_position(idx2: torch.Tensor, sizes: Sequence[int], signed: bool) -> int:
    return int(_out_of_range(idx2, sizes, signed).reshape(-1).nonzero()[0, 0])


def in_range(idx2: torch.Tensor, sizes: Sequence[int], signed: bool) -> torch.Tensor:
    """Bool ``idx2.shape[:-1]``: whether every coordinate of each tuple (``idx2``: the index
    matrix, or any ``[..., k]`` int64 tuples) is in range (``check_indices=False`` skips the
    others).  Torch ops only, on ``idx2``'s device, no host sync."""
    return ~_out_of_range(idx2, sizes, signed).any(dim=-1)


def masked_rows(idx2: torch.Tensor, sizes: Sequence[int], signed: bool, batch: int = 1,
                per_batch: int = 1):
    """``(rows, ok)``: each tuple's row in ``[batch * prod(sizes), slice]`` (negative coordinates
    of a signed type wrapped), with out-of-range tuples sent to row 0 of their batch, and which
    tuples were in range.  For ``check_indices=False`` where torch's index kernels assert (CUDA):
    torch ops on ``idx2``'s device with the sizes as scalars, so no host read and no
    host-to-device copy (a uint64 of 2**63 or more reads negative in ``idx2``: out of range)."""
    n = idx2.shape[0]
    ok = torch.ones(n, dtype=torch.bool, device=idx2.device)
    rows = torch.zeros(n, dtype=torch.int64, device=idx2.device)
    stride = 1
    for j in reversed(range(len(sizes))):
        c = idx2[:, j].to(torch.int64)
        if signed:
            c = torch.where(c < 0, c + sizes[j], c)
        ok_j = (c >= 0) & (c < sizes[j])
        ok &= ok_j
        rows += torch.where(ok_j, c, 0) * stride
        stride *= sizes[j]
    if batch > 1:
        rows += torch.arange(n, device=rows.device) // per_batch * stride
    return rows, ok


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
        mn, mx = torch.stack(torch.aminmax(idx2)).tolist()      # one host read
        if mn >= 0 and (not rest or mx < rest[0]):
            if first == 0 or mx < sizes[0] or _linear_fits(mx, sizes, idx2.dtype):
                return [False] * k
    mns, mxs = torch.stack(torch.aminmax(idx2, dim=0)).tolist()   # one host read
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


def report_bad_index(op: str, indices: torch.Tensor, idx2: torch.Tensor, sizes: Sequence[int],
                      signed: bool, dim_names: Sequence[str]) -> None:
    pos = first_bad_position(idx2, sizes, signed)
    raise_index_error(op, indices, pos, indices.shape, sizes, dim_names, signed, len(sizes))


SIGN_BIT_64 = -2**63


def flip_sign_bit(t: torch.Tensor) -> torch.Tensor:
    """A new int64 tensor: ``t``'s 64-bit pattern (uint64 or int64) with the sign bit flipped, so
    comparing the results as int64 compares the originals as uint64."""
    return torch.bitwise_xor(t.view(torch.int64), SIGN_BIT_64)
