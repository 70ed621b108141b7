"""ScatterND in Triton: a range-check pass, then copy-free scatter passes into a prepared output.

The output already holds the input (the caller copies it, or it is the in-place target).  Modes:
overwrite (last tuple in index order wins, through a claim pass), direct store (element scatters
outside deterministic mode: single elements cannot mix), and atomic add / max / min where the
atomics are exact for the dtype (integers) or where order does not matter to the caller.
"""
from __future__ import annotations

import functools
import math
from typing import Optional

import torch
import triton
import triton.language as tl

from .._checks import raise_index_error
from .._forms import row_major_strides
from .._tables import SIGNED_INDEX_DTYPES
from ..portable._common import index_matrix, masked_rows
from ..portable.scatter_nd import AddressedRows, make_kernels, scatter_nd_torch
from ._common import (MAX_K, NO_VIOLATION, NO_VIOLATION_K, bits_view, cdiv, dims8, fits32, launch,
                      launch_guard, refuse_capture, reshaped, tuple_blocks, tuple_offsets,
                      vec_width)

_SIGNED_IDX = (torch.int64, torch.int32)

# MODE values (constexpr)
CHECK, CLAIM, STORE_WINNERS, STORE, ADD, MAX, MIN = range(7)


@triton.jit(do_not_specialize=["n_tuples", "slice_len", "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7",
                               "t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"])
def _scatter_nd_kernel(
    out_ptr, upd_ptr, idx_ptr, s0, s1, s2, s3, s4, s5, s6, s7, t0, t1, t2, t3, t4, t5, t6, t7,
    aux_ptr,
    n_tuples, slice_len,
    K: tl.constexpr, SIGNED: tl.constexpr, MODE: tl.constexpr, VEC: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_S: tl.constexpr,
):
    """One program: tuples [pid_t*BLOCK_T, +BLOCK_T) x slice elements [pid_s*BLOCK_S, +BLOCK_S).

    Grid: (cdiv(n_tuples, BLOCK_T), cdiv(slice_len, BLOCK_S)).  ``out`` is ``[rows, slice_len]``
    and ``upd`` ``[n_tuples, slice_len]``, both contiguous; ``s0..s7``/``t0..t7``: the K indexed
    sizes and their row strides (then zeros), as scalar arguments.  ``aux_ptr``: the violation flag
    (CHECK) or the per-row claim buffer (CLAIM, STORE_WINNERS).  Out-of-range tuples never touch
    memory.  Every atomic is relaxed: each needs atomicity only, never ordering with other
    memory (the claims are read by the next launch, the flag by the host after the kernel).
    Sizes are not specialised (a new size reuses the compiled kernel); VEC: ``slice_len`` is a
    multiple of VEC elements and the data 16-byte aligned, so rows move in 16-byte words.
    """
    pid_t = tl.program_id(0)
    pid_s = tl.program_id(1)
    offs_t = pid_t.to(tl.int64) * BLOCK_T + tl.arange(0, BLOCK_T)          # [BLOCK_T]
    mask_t = offs_t < n_tuples
    row, ok, first_bad = tuple_offsets(idx_ptr, (s0, s1, s2, s3, s4, s5, s6, s7),
                                  (t0, t1, t2, t3, t4, t5, t6, t7), offs_t, mask_t, K, SIGNED)
    if MODE == 0:
        b_first = tl.min(first_bad, axis=0)
        tl.atomic_min(aux_ptr, b_first, mask=(pid_s == 0) & (b_first < NO_VIOLATION_K),
                      sem="relaxed")
    elif MODE == 1:
        # claim the row for the highest ordinal: the last tuple in index order wins
        # (this mode runs with one program along the slice axis)
        tl.atomic_max(aux_ptr + row, offs_t.to(aux_ptr.dtype.element_ty), mask=ok, sem="relaxed")
    else:
        if VEC > 1:
            slice_len = (slice_len // VEC) * VEC     # = slice_len: tells the compiler VEC divides it
        offs_s = pid_s.to(tl.int64) * BLOCK_S + tl.arange(0, BLOCK_S)        # [BLOCK_S]
        mask_s = offs_s < slice_len
        if MODE == 2:
            owner = tl.load(aux_ptr + row, mask=ok, other=-1).to(tl.int64)
            ok = ok & (owner == offs_t)
        m = ok[:, None] & mask_s[None, :]                                      # [BLOCK_T, BLOCK_S]
        src = offs_t * slice_len
        dst_row = row * slice_len
        b_upd = tl.load(upd_ptr + src[:, None] + offs_s[None, :], mask=m)
        dst = out_ptr + dst_row[:, None] + offs_s[None, :]
        if MODE == 4:
            tl.atomic_add(dst, b_upd, mask=m, sem="relaxed")
        elif MODE == 5:
            tl.atomic_max(dst, b_upd, mask=m, sem="relaxed")
        elif MODE == 6:
            tl.atomic_min(dst, b_upd, mask=m, sem="relaxed")
        else:
            tl.store(dst, b_upd, mask=m)


_ATOMIC_ADD = (torch.int32, torch.int64, torch.uint32, torch.uint64, torch.float32,
               torch.float64)
_ATOMIC_MINMAX = (torch.int32, torch.int64)
# unsigned adds run on the bits of the signed twin: two's-complement addition wraps alike
_ADD_AS = {torch.uint32: torch.int32, torch.uint64: torch.int64}


def scatter_nd_triton_supports(dtype: torch.dtype, reduction: str, deterministic: bool) -> bool:
    """Whether the kernel computes this (dtype, reduction) exactly as the portable path does.

    Overwrite: every dtype (bits are moved).  add: integer atomics are exact (unsigned ones
    wrap like their signed twins' bits); float atomics only outside deterministic mode (the
    order of additions varies).  max/min: signed integers (unsigned order is not the signed
    twin's, so uint32/uint64 take the portable path).  mul has no atomic; fp16/bf16 atomics are
    left out (the interpreter cannot run them).
    """
    if reduction == "none":
        return True
    if reduction == "add":
        return dtype in _ATOMIC_ADD and (not deterministic or not dtype.is_floating_point)
    if reduction in ("max", "min"):
        return dtype in _ATOMIC_MINMAX
    return False


@functools.lru_cache(maxsize=1024)
def _meta(index_sizes: tuple) -> tuple:
    """The sizes and row strides of the indexed dimensions, as the kernel's 16 scalar arguments
    (passed by value: no device copy)."""
    return dims8(index_sizes) + dims8(row_major_strides(index_sizes))


@functools.lru_cache(maxsize=4096)
def _plan(mode, n_tuples, slice_len, k, signed, element_size, vec, meta, max_block, dtypes):
    """(grid, constexprs, launch key) of one launch: the host arithmetic of a layout, once."""
    block_t, block_s = tuple_blocks(slice_len, max_block, element_size)
    moves = mode >= STORE_WINNERS
    grid = (cdiv(n_tuples, block_t), max(1, cdiv(slice_len, block_s)) if moves else 1)
    consts = dict(K=k, SIGNED=signed, MODE=mode, VEC=vec, BLOCK_T=block_t, BLOCK_S=block_s)
    key = ("scatter", dtypes, fits32(*meta, n_tuples, slice_len), tuple(consts.values()))
    return grid, consts, key


def _launch(mode, out2d, upd2d, idx, meta, aux, n_tuples, slice_len, k, max_block):
    vec = vec_width(out2d.element_size(), slice_len, tensors=(out2d, upd2d)) \
        if mode >= STORE_WINNERS else 1
    grid, consts, key = _plan(mode, n_tuples, slice_len, k, idx.dtype in _SIGNED_IDX,
                              out2d.element_size(), vec, meta, max_block,
                              (out2d.dtype, upd2d.dtype, idx.dtype, aux.dtype))
    with launch_guard(idx):
        launch(_scatter_nd_kernel, grid, key, (out2d, upd2d, idx, aux),
               (out2d, upd2d, idx, *meta, aux, n_tuples, slice_len), consts)


def scatter_nd_check_triton(index_sizes, indices: torch.Tensor,
                            max_block: Optional[int] = None) -> torch.Tensor:
    """Range-check ``indices`` (``[..., K]``) against ``index_sizes``; returns the int64 flag
    (first offending flat position, or ``NO_VIOLATION``).  Reads only the indices."""
    k = indices.shape[-1]
    flag = torch.full((1,), NO_VIOLATION, dtype=torch.int64, device=indices.device)
    n_tuples = indices.numel() // k
    if n_tuples:
        _launch(CHECK, flag, flag, indices.contiguous(), _meta(tuple(index_sizes)), flag,
                n_tuples, 1, k, max_block)
    return flag


def scatter_nd_triton(out: torch.Tensor, indices: torch.Tensor, updates: torch.Tensor, k: int,
                      reduction: str, deterministic: bool,
                      max_block: Optional[int] = None) -> None:
    """Scatter into ``out`` (natural shape ``[*indexed(k), *slice]``, already holding the input).

    ``indices`` is ``[..., k]`` and in range (checked before); ``updates`` is
    ``indices.shape[:-1] + slice``.  The caller checks ``scatter_nd_triton_supports`` first.
    """
    index_sizes = tuple(out.shape[:k])
    slice_len = math.prod(out.shape[k:])
    n_tuples = indices.numel() // k
    if n_tuples == 0 or out.numel() == 0:
        return
    rows = math.prod(index_sizes)
    if not out.is_contiguous():
        # A strided target (a permuted KV cache, a slice): the kernels run on a compact buffer
        # of the rows the tuples address, renumbered (AddressedRows: sync-free torch ops), and
        # those rows are written back: never a contiguous copy of the whole target.
        idx2 = index_matrix(indices, n_tuples, k, small=False)
        lin, ok = masked_rows(idx2, index_sizes, indices.dtype in SIGNED_INDEX_DTYPES)
        addressed = AddressedRows(out, torch.where(ok, lin, rows), index_sizes, rows)
        scatter_nd_triton(addressed.compact, addressed.local.unsqueeze(1), updates, 1,
                          reduction, deterministic, max_block)
        addressed.write_back()
        return
    dst = out
    idx = indices.contiguous()
    upd = updates.contiguous()
    meta = _meta(index_sizes)
    out2d, upd2d = dst.view(rows, slice_len), upd.view(n_tuples, slice_len)
    if reduction == "none":
        out2d, upd2d = bits_view(out2d), bits_view(upd2d)
        if n_tuples == 1 or (slice_len == 1 and not deterministic):
            # no two tuples (or single elements, which cannot mix): no claim pass
            _launch(STORE, out2d, upd2d, idx, meta, idx, n_tuples, slice_len, k, max_block)
        else:
            claim = torch.full((rows,), -1, device=out.device,
                               dtype=torch.int32 if n_tuples < 2**31 else torch.int64)
            _launch(CLAIM, out2d, upd2d, idx, meta, claim, n_tuples, slice_len, k, max_block)
            _launch(STORE_WINNERS, out2d, upd2d, idx, meta, claim, n_tuples, slice_len, k,
                    max_block)
    else:
        if out2d.dtype in _ADD_AS:   # add is the same on the bits of the signed twin
            twin = _ADD_AS[out2d.dtype]
            out2d, upd2d = out2d.view(twin), upd2d.view(twin)
        mode = {"add": ADD, "max": MAX, "min": MIN}[reduction]
        _launch(mode, out2d, upd2d, idx, meta, idx, n_tuples, slice_len, k, max_block)


# ---------------------------------------------------------------------------------------------
# The op kernels (CUDA dispatch key; the CPU key under backend("triton") with the interpreter)
# ---------------------------------------------------------------------------------------------

def _compute(op, dst, source, indices, updates, lay, reduction, check, deterministic, fresh):
    """Check (a pre-pass reading only the indices), copy, scatter; the portable path for the
    dtype/reduction pairs ``scatter_nd_triton_supports`` refuses and for index tuples of more
    than ``MAX_K`` coordinates."""
    if not scatter_nd_triton_supports(dst.dtype, reduction, deterministic) or lay.k > MAX_K:
        scatter_nd_torch(dst, indices, updates, lay, reduction, source, fresh, op=op,
                         deterministic=deterministic, check=check)
        return
    nat_indices = reshaped(indices, lay.natural_indices_shape)
    if check:
        refuse_capture(op, indices)
        pos = int(scatter_nd_check_triton(lay.index_sizes, nat_indices).item())  # one host sync
        if pos != NO_VIOLATION:
            raise_index_error(op, indices, pos, indices.shape, lay.index_sizes,
                              lay.dim_names(dst.dim()), indices.dtype in SIGNED_INDEX_DTYPES,
                              lay.k)
    if source is not None:
        dst.copy_(source)
    scatter_nd_triton(reshaped(dst, lay.natural_input_shape), nat_indices,
                      reshaped(updates, lay.natural_out_shape), lay.k, reduction, deterministic)


def _kernels() -> dict:
    return make_kernels(_compute)


KERNELS = _kernels()
