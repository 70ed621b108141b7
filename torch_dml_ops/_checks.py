"""Metadata checks shared by every operator, every backend and the fake kernels.

Everything here reads metadata only (shapes, dtypes, devices, dimension counts, the feature-level
argument), so the same function runs in the fake kernel at trace time and in the real kernel at run
time, and compiled and eager calls fail alike.  The one data-dependent check, the index range, is
performed by the kernels; :func:`raise_index_error` turns what they found into an ``IndexError``.
The C++ kernels enforce the same rules (``csrc/checks.cpp``): the tables, levels and messages
of the DirectML rules are written once, in ``_data`` (``MESSAGES``), and generated into the C++
build, so only each rule's comparison is written in both languages (the kernels must check every
caller's call, and the fake kernels symbolic shapes: tests/test_entry_points.py holds the two to
the same verdicts).

Rules cite the page they come from: ``spec <page>`` is a DirectML page in ``shared/spec``,
``spec README n`` is item n of that folder's list of contradictions.
"""
from __future__ import annotations

import math
from typing import Callable, Dict, Optional, Sequence, cast

import torch

from . import _compat, _data
from ._data import BATCH_DIMS_FROM, FULL_RANK, FULL_RANK_FROM, OLD_RANK
from ._errors import (ConstraintError, ConstraintIndexError, ConstraintTypeError,
                      MemoryOverlapError, message)
from ._forms import GatherLayout, gather_layout
from ._levels import PERMISSIVE, check_level_argument, level_at_least, level_name
from ._tables import (DATA_DTYPES, DIRECTIONS, DML_DATA_DTYPES, INDEX_DTYPES, INDEX_DTYPES_2_1,
                      INDEX_LIMITS, REDUCTIONS, TOPK_INDEX_DTYPES, dml_type_name, type_list)


# ---------------------------------------------------------------------------------------------
# Data types
# ---------------------------------------------------------------------------------------------

def check_data_dtype(op: str, tensor_name: str, dtype: torch.dtype, level: str) -> None:
    allowed = DATA_DTYPES if level == PERMISSIVE else DML_DATA_DTYPES
    if dtype not in allowed:
        raise ConstraintTypeError(message(
            "data_dtype", op=op, name=tensor_name, dtype=dtype, dml_type=dml_type_name(dtype),
            level=level_name(level), supported=type_list(allowed)))


def check_index_dtype(op: str, tensor_name: str, dtype: torch.dtype, level: str) -> None:
    allowed = INDEX_DTYPES_2_1 if level == "2_1" else INDEX_DTYPES
    if dtype not in allowed:
        hint = message("index_dtype_hint") if level == "2_1" and dtype in INDEX_DTYPES else ""
        raise ConstraintTypeError(message(
            "index_dtype", op=op, name=tensor_name, dtype=dtype, dml_type=dml_type_name(dtype),
            level=level_name(level), supported=type_list(allowed), hint=hint))


# ---------------------------------------------------------------------------------------------
# Dimension counts
# ---------------------------------------------------------------------------------------------

def dimension_count_rule(level: str, full_rank_from: str) -> Optional[tuple]:
    """(min, max) DimensionCount at ``level`` for an op whose 1..8 table starts at ``full_rank_from``.

    ``None`` for the permissive level (no limit).
    """
    if level == PERMISSIVE:
        return None
    return FULL_RANK if level_at_least(level, full_rank_from) else OLD_RANK


def check_dml_dimension_count(op: str, names: Sequence[str], ranks: Sequence[int], level: str,
                              full_rank_from: str) -> None:
    """DML form: every tensor has the same DimensionCount, within the level's table."""
    # spec DML_GATHER_ND.md "Tensor constraints": the tensors have the same DimensionCount.
    for name, rank in zip(names[1:], ranks[1:]):
        if rank != ranks[0]:
            raise ConstraintError(message("dml_rank_equal", op=op, name=name, first=names[0],
                                          rank=ranks[0], got=rank))
    rule = dimension_count_rule(level, full_rank_from)
    if rule is not None and not (rule[0] <= ranks[0] <= rule[1]):
        raise ConstraintError(message("dml_rank_range", op=op, name=names[0], want=_want(rule),
                                      level=level_name(level), got=ranks[0]))


def check_natural_ranks(op: str, names: Sequence[str], ranks: Sequence[int], level: str,
                        full_rank_from: str) -> None:
    """Natural form: each tensor is padded with leading 1s, so it needs at most the level's count."""
    rule = dimension_count_rule(level, full_rank_from)
    if rule is None:
        return
    for name, rank in zip(names, ranks):
        if rank > rule[1]:
            raise ConstraintError(message("natural_rank", op=op, name=name, rank=rank,
                                          level=level_name(level), want=_want(rule),
                                          most=rule[1]))


def _want(rule: tuple) -> str:
    """A DimensionCount rule as the messages say it: ``4`` or ``1 to 8``."""
    return str(rule[0]) if rule[0] == rule[1] else f"{rule[0]} to {rule[1]}"


# ---------------------------------------------------------------------------------------------
# Misc shared checks
# ---------------------------------------------------------------------------------------------

def check_same_device(op: str, named: Sequence[tuple]) -> None:
    first_name, first = named[0]
    for name, t in named[1:]:
        if t.device != first.device:
            raise ValueError(message("same_device", op=op, name=name, device=t.device,
                                     first=first_name, first_device=first.device))


def _extent(t: torch.Tensor) -> int:
    """Elements from ``t``'s first element to one past its last (``t`` has elements)."""
    if t.is_contiguous():
        return t.numel()
    return 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()))


def _layout(t: torch.Tensor) -> str:
    """Sizes, strides and storage offset, for messages."""
    return message("layout", sizes=tuple(t.shape), strides=tuple(t.stride()),
                   offset=t.storage_offset(), itemsize=t.element_size())


def _byte_span(t: torch.Tensor) -> tuple:
    """[start, end) byte addresses that a strided tensor may touch (empty span for numel 0)."""
    if t.numel() == 0:
        return (0, 0)
    start = t.data_ptr()
    return (start, start + _extent(t) * t.element_size())


#: The most steps :func:`_overlap_within` takes before it answers "too hard" (``OVERLAP_TOO_HARD``);
#: the C++ check (``kOverlapWork``) counts the same steps.
OVERLAP_WORK = _data.OVERLAP_WORK
OVERLAP_NO, OVERLAP_YES, OVERLAP_TOO_HARD = 0, 1, 2


def _overlap_terms(t: torch.Tensor) -> list:
    """``(byte stride, size - 1)`` of each dimension that moves (size > 1, stride != 0), and
    ``(1, element size - 1)`` for the bytes of one element."""
    es = t.element_size()
    terms = [(abs(st) * es, sz - 1) for sz, st in zip(t.shape, t.stride()) if sz > 1 and st]
    if es > 1:
        terms.append((1, es - 1))
    return terms


def _solve_bounded(terms: list, rhs: int, max_work: int) -> int:
    """Whether ``sum(a * x for a, u in terms) == rhs`` has a solution with ``0 <= x <= u``
    (every ``a > 0``): ``OVERLAP_YES``, ``OVERLAP_NO``, or ``OVERLAP_TOO_HARD`` after
    ``max_work`` steps.  Equal coefficients are merged and bounds trimmed to ``rhs // a``; then
    a depth-first search, largest coefficient first, takes only the values of each unknown that
    the rest can complete: the remainder must lie within what the smaller terms reach and be a
    multiple of their gcd (so it steps through the candidates by ``gcd / gcd(a, gcd)``).  The
    formulation is NumPy's (``numpy/_core/src/common/mem_overlap.c``, which uses a different
    search).  Mirrors ``solve_bounded`` in ``csrc/checks.cpp`` step for step."""
    merged: dict = {}
    for a, u in terms:
        merged[a] = merged.get(a, 0) + u
    E = []
    for a in sorted(merged, reverse=True):
        u = min(merged[a], rhs // a)
        if u > 0:
            E.append((a, u))
    n = len(E)
    reach = [0] * (n + 1)      # the largest sum of the terms k.. (capped at rhs + 1)
    gcds = [0] * (n + 1)       # the gcd of their coefficients
    for k in range(n - 1, -1, -1):
        a, u = E[k]
        reach[k] = min(reach[k + 1] + a * u, rhs + 1)
        gcds[k] = math.gcd(gcds[k + 1], a)
    work = 0

    def search(k: int, rem: int) -> int:
        nonlocal work
        if rem == 0:
            return OVERLAP_YES
        if k == n or rem > reach[k] or rem % gcds[k]:
            return OVERLAP_NO
        a, u = E[k]
        if k == n - 1:
            return OVERLAP_YES      # rem is a multiple of a, at most a * u
        below = rem - reach[k + 1]
        lo = (below + a - 1) // a if below > 0 else 0
        x = min(u, rem // a)
        g = gcds[k + 1]
        while x >= lo and (rem - a * x) % g:        # the largest x the rest can complete
            x -= 1
            work += 1
            if work > max_work:
                return OVERLAP_TOO_HARD
        step = g // math.gcd(a, g)
        while x >= lo:
            found = search(k + 1, rem - a * x)
            if found != OVERLAP_NO:
                return found
            x -= step
            work += 1
            if work > max_work:
                return OVERLAP_TOO_HARD
        return OVERLAP_NO

    if rhs < 0:
        return OVERLAP_NO
    if rhs >= 1 << 62:          # (the C++ twin's int64 arithmetic)
        return OVERLAP_TOO_HARD
    return search(0, rhs)


def _overlap_within(a: torch.Tensor, a_span: tuple, b: torch.Tensor, b_span: tuple) -> int:
    """Whether two strided tensors (with their byte spans) share a byte of memory:
    ``OVERLAP_NO``, ``OVERLAP_YES``, or ``OVERLAP_TOO_HARD`` (undecided within ``OVERLAP_WORK``
    steps: rare, multi-dimensional views with unrelated strides over one buffer; what it
    costs: M7 in docs/benchmarks.md, "Measured choices").

    Exact, not a comparison of byte ranges: ``x[:, ::2]`` and ``x[:, 1::2]`` have intersecting
    ranges and no common element.  A byte of ``a`` is ``start_a + sum(sa * i) + p`` (``p`` below
    its element size), one of ``b`` counted down from its last byte ``end_b - 1 - sum(sb * j) -
    q``; they meet when ``sum(sa * i) + p + sum(sb * j) + q == end_b - 1 - start_a``, a bounded
    equation with positive coefficients (:func:`_solve_bounded`; the mirrored equation from
    ``b``'s start is used when its right side is smaller)."""
    (a_start, a_end), (b_start, b_end) = a_span, b_span
    if not (a_start < b_end and b_start < a_end):
        return OVERLAP_NO
    rhs = min(b_end - 1 - a_start, a_end - 1 - b_start)
    return _solve_bounded(_overlap_terms(a) + _overlap_terms(b), rhs, OVERLAP_WORK)


def storage_bytes_needed(t: torch.Tensor) -> int:
    """Bytes of storage ``t`` addresses, from the start of its storage (0 without elements)."""
    if t.numel() == 0:
        return 0
    # A SymInt under tracing (storage_offset), which stands for an int here.
    return cast(int, (t.storage_offset() + _extent(t)) * t.element_size())


def check_dense(op: str, named) -> None:
    """Only dense (strided) tensors: the kernels address memory through strides (the C++ kernels
    enforce the same rule with the same message)."""
    for name, t in named:
        if t.layout is not torch.strided:
            raise ConstraintError(message("dense", op=op, name=name))


def check_storage(op: str, role: str, t: torch.Tensor) -> None:
    """Raise RuntimeError (the type of torch's own storage bounds check) unless ``t``'s storage
    holds every byte ``t`` addresses.  A storage resized under a tensor (FSDP frees sharded
    parameters with ``untyped_storage().resize_(0)``) would otherwise be read or written through
    a dangling pointer: by the native and Triton kernels, and by some torch ops themselves.
    Metadata only (M8 in docs/benchmarks.md), for every backend and device, before anything is
    read or written."""
    have = t.untyped_storage().nbytes()
    if t.is_contiguous() and t.storage_offset() * t.itemsize + t.nbytes <= have:
        return
    need = storage_bytes_needed(t)
    if need > have:
        raise RuntimeError(message("storage", op=op, name=role, have=have, need=need,
                                   shape=tuple(t.shape), stride=tuple(t.stride()),
                                   offset=t.storage_offset(), itemsize=t.element_size()))


def check_storages(op: str, *named) -> None:
    """:func:`check_storage` for each ``(role, tensor)`` pair (``None`` tensors skipped)."""
    for role, t in named:
        if t is not None:
            check_storage(op, role, t)


def resolved(t: torch.Tensor) -> torch.Tensor:
    """``t`` with a set negative bit (``torch._neg_view``, the imaginary part of a conjugate)
    materialized: the kernels read memory raw, so they must see the values the tensor shows."""
    return t.resolve_neg() if t.is_neg() else t


def written(t: torch.Tensor) -> None:
    """Bump the version counter of a tensor a kernel wrote through its data pointer, as torch's
    in-place and ``out=`` ops do (autograd uses it to detect stale saved tensors)."""
    if not t.is_inference():
        torch.autograd.graph.increment_version(t)


def unrecorded(t: torch.Tensor) -> torch.Tensor:
    """An alias of ``t``'s memory (its storage, offset, sizes and strides, not its negative bit)
    with a version counter of its own: a kernel writes a caller's tensor through it in as many
    steps as it takes, then records the one write on ``t`` (:func:`written`), as a torch op
    records one per call."""
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(
        t.untyped_storage(), t.storage_offset(), t.shape, t.stride())


def has_internal_overlap(t: torch.Tensor) -> bool:
    """Whether two elements of ``t`` share a memory location (exact for every layout)."""
    if t.is_contiguous() or t.numel() <= 1:
        return False
    if _compat.debug_has_internal_overlap is not None:
        verdict = _compat.debug_has_internal_overlap(t)  # 0 no, 1 yes, 2 too hard to tell
        if verdict != 2:
            return verdict == 1
    dims = sorted((abs(st), sz) for sz, st in zip(t.shape, t.stride()) if sz > 1)
    extent = 0   # the largest offset reachable with the dims so far
    for st, sz in dims:
        if st <= extent:
            break                 # this dim may land on offsets already reached: look closer
        extent += (sz - 1) * st
    else:
        return False              # every stride jumps past all smaller dims: no overlap
    if dims[0][0] == 0:
        return True
    # Rare interleaved or overlapping layouts: count the distinct offsets.
    offsets = torch.zeros((), dtype=torch.int64)
    for sz, st in zip(t.shape, t.stride()):
        offsets = (offsets.unsqueeze(-1) + torch.arange(sz, dtype=torch.int64) * st)
    return int(offsets.reshape(-1).unique().numel()) < t.numel()


def check_writable(op: str, out: torch.Tensor, name: str = "OutputTensor (out)") -> None:
    """What torch checks before an in-place or ``out=`` write: no inference tensor outside
    inference mode, no internal overlap."""
    # (dynamo cannot trace is_inference(); a compiled graph gets torch's own check at run time)
    if (not torch.compiler.is_compiling() and out.is_inference()
            and not torch.is_inference_mode_enabled()):
        raise RuntimeError(message("inference", op=op, name=name))
    if has_internal_overlap(out):
        raise MemoryOverlapError(message("internal_overlap", op=op, name=name,
                                         sizes=tuple(out.shape), strides=tuple(out.stride())))


def check_out_meta(op: str, out, shape: Sequence[int], dtype: torch.dtype,
                   device: Optional[torch.device] = None,
                   name: str = "OutputTensor (out)") -> None:
    """The metadata half of :func:`check_out`, shared with the fake kernels (same exceptions).
    ``device``: the inputs' (a meta ``out`` of CPU inputs reaches the fake kernel)."""
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{op}: out must be a Tensor, got {type(out).__name__}")
    if out.dtype != dtype:
        raise ConstraintTypeError(message("out_dtype", op=op, name=name, dtype=out.dtype,
                                          want=dtype))
    if tuple(out.shape) != tuple(shape):
        raise ConstraintError(message("out_shape", op=op, name=name, shape=tuple(out.shape),
                                      want=tuple(shape)))
    if device is not None and out.device != device:
        raise ValueError(message("out_device", op=op, name=name, device=out.device, want=device))
    check_dense(op, ((name, out),))


def check_out(op: str, out: torch.Tensor, shape: Sequence[int], dtype: torch.dtype,
              device: torch.device, inputs: Sequence[tuple],
              name: str = "OutputTensor (out)") -> None:
    """A preallocated ``out=`` tensor (or the target of an in-place op): exact shape, dtype and
    device, writable, no overlap with itself or any input."""
    check_out_meta(op, out, shape, dtype, device, name)
    check_writable(op, out, name)
    if type(out) is not torch.Tensor and out.data_ptr() == 0:
        return      # a wrapper subclass (DTensor) owns no memory: the kernel checks its shards
    o_span = _byte_span(out)
    if o_span[0] == o_span[1]:
        return
    for in_name, t in inputs:
        t_span = _byte_span(t)
        if not (t_span[0] < o_span[1] and o_span[0] < t_span[1]):
            continue        # (the common call: apart; inlined, as it runs on every call)
        status = _overlap_within(out, o_span, t, t_span)
        if status == OVERLAP_YES:
            raise MemoryOverlapError(message("overlap", op=op, name=name, input=in_name))
        if status == OVERLAP_TOO_HARD:
            raise MemoryOverlapError(message(
                "overlap_too_hard", op=op, name=name, input=in_name, work=OVERLAP_WORK,
                layout=_layout(out), input_layout=_layout(t)))


def raise_index_error(op: str, indices: torch.Tensor, flat_position: int, index_tensor_shape,
                      dim_sizes: Sequence[int], dim_names: Sequence[str], signed: bool,
                      tuple_size: int) -> None:
    """Turn the flat position of an offending index coordinate into an ``IndexError``.

    ``flat_position`` is the row-major position in ``indices`` (its logical shape
    ``index_tensor_shape``); coordinate ``flat_position % tuple_size`` addresses ``dim_sizes[j]``.
    """
    j = flat_position % tuple_size
    value = indices.reshape(-1)[flat_position].item()
    rev = []
    rem = flat_position
    for s in reversed(list(index_tensor_shape)):
        rev.append(rem % s)
        rem //= s
    pos = tuple(reversed(rev))
    size = dim_sizes[j]
    valid = f"[{-size}, {size - 1}]" if signed else f"[0, {size - 1}]"
    if size == 0:
        valid = message("index_range_empty")
    neg = "" if signed else message("index_unsigned", dtype=indices.dtype)
    raise IndexError(message("index_range", op=op, value=value, position=pos, dim=dim_names[j],
                             size=size, valid=valid, unsigned=neg))

# ---------------------------------------------------------------------------------------------
# Per-operator checks
# ---------------------------------------------------------------------------------------------

class _Memo:
    """Results of metadata checks keyed on plain-int shapes, dtypes and arguments.

    The checks are pure functions of metadata, and re-running them costs more than a small gather;
    shapes holding SymInts (tracing) are not hashable and are simply not memoized.
    """

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self.data: dict = {}

    def get(self, key):
        try:
            return self.data.get(key)
        except TypeError:   # unhashable SymInt
            return None

    def put(self, key, value) -> None:
        try:
            if len(self.data) >= self.size:
                self.data.clear()
            self.data[key] = value
        except TypeError:
            pass


_gather_memo = _Memo()


def _type_name(v) -> str:
    return type(v).__name__


def check_tensor(op: str, name: str, t) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a Tensor, got {_type_name(t)}")


_TENSOR_NAMES = ("InputTensor", "IndicesTensor", "UpdatesTensor")


def check_tensors(op: str, *tensors, out=None) -> None:
    """The public functions' tensor arguments (input, indices, updates, out), before the
    dispatcher sees them (it would raise a RuntimeError for what torch users expect to be a
    TypeError)."""
    for name, t in zip(_TENSOR_NAMES, tensors):
        if not isinstance(t, torch.Tensor):
            check_tensor(op, name, t)
    if out is not None and not isinstance(out, torch.Tensor):
        check_tensor(op, "out", out)


def check_int(op: str, name: str, v, optional: bool = False) -> None:
    """An ``int`` argument (a SymInt while tracing); bool is refused, as torch's parser does."""
    if v is None and optional:
        return
    if isinstance(v, bool) or not isinstance(v, (int, torch.SymInt)):
        want = "an int or None" if optional else "an int"
        raise TypeError(f"{op}: {name} must be {want}, got {_type_name(v)} {v!r}")


def check_bool(op: str, name: str, v) -> None:
    if not isinstance(v, bool):
        raise TypeError(f"{op}: {name} must be a bool, got {_type_name(v)} {v!r}")


def check_str(op: str, name: str, v) -> None:
    if not isinstance(v, str):
        raise TypeError(f"{op}: {name} must be a str, got {_type_name(v)} {v!r}")


def check_dtype_arg(op: str, name: str, v) -> None:
    if not isinstance(v, torch.dtype):
        raise TypeError(f"{op}: {name} must be a torch.dtype, got {_type_name(v)} {v!r}")


_TYPE_CHECKS: Dict[str, Callable[[str, str, object], None]] = {
    "tensor": check_tensor, "int": check_int, "str": check_str, "bool": check_bool,
    "dtype": check_dtype_arg,
    "int?": lambda op, name, v: check_int(op, name, v, optional=True),
}


def check_arg_types(op: str, *args) -> None:
    """The detailed type checks of an op's arguments, ``(kind, name, value)`` each, in schema
    order; the per-op checks run them only when one fast test of the common types fails."""
    for kind, name, v in args:
        _TYPE_CHECKS[kind](op, name, v)


def raise_documented(check) -> None:
    """For a call a kernel refused: run the Python ``check`` of the same rules, which raises the
    documented exception (``ConstraintError``, ``ConstraintTypeError`` ..., a ``TypeError`` for
    an argument's type) with the kernel's message.  Returns when the check passes (a refusal it
    does not cover, e.g. a bad index value) or fails for another reason (e.g. a functorch wrapper
    it cannot inspect): the caller then re-raises the kernel's own exception."""
    try:
        check()
    except (ValueError, TypeError) as documented:
        raise documented from None
    except Exception:   # noqa: BLE001  not a rule the Python checks know: the kernel's error
        return


def check_level(check: Callable[[], object]) -> None:
    """A call at a DirectML level (the caller tests ``level != PERMISSIVE``, which is all the
    permissive default pays): ``check``, its Python checks, through raise_documented.  They are
    the only home of a level's rules (the C++ kernels ignore the level).  Not while compiling:
    the fake kernel checks the traced call."""
    if not torch.compiler.is_compiling():
        raise_documented(check)


def as_int(op: str, name: str, v):
    """The public functions' int arguments: ints as they are, other integral scalars (numpy
    integers, anything with ``__index__`` but bool) converted, the rest a ``TypeError``."""
    if type(v) is int or v is None:
        return v
    if not isinstance(v, bool) and not isinstance(v, torch.SymInt) and hasattr(v, "__index__"):
        return v.__index__()
    check_int(op, name, v)
    return v


def check_gather_nd(input: torch.Tensor, indices: torch.Tensor, batch_dims: int,
                    input_dimension_count: Optional[int], indices_dimension_count: Optional[int],
                    level: str, check_indices: bool = True) -> GatherLayout:
    """Every metadata rule of DML_GATHER_ND / DML_GATHER_ND1 at ``level``; returns the layout.

    The argument types are checked first, the same for every backend and the fake kernel, so
    the memoized results (keyed on values) never see a value of another type."""
    if not (type(batch_dims) is int and input_dimension_count is None
            and indices_dimension_count is None and type(level) is str
            and type(check_indices) is bool and isinstance(input, torch.Tensor)
            and isinstance(indices, torch.Tensor)):      # else the detailed checks (M8)
        check_arg_types("gather_nd", ("tensor", "InputTensor", input),
                        ("tensor", "IndicesTensor", indices), ("int", "batch_dims", batch_dims),
                        ("int?", "input_dimension_count", input_dimension_count),
                        ("int?", "indices_dimension_count", indices_dimension_count),
                        ("str", "feature_level", level), ("bool", "check_indices", check_indices))
    if input.device != indices.device:
        check_same_device("gather_nd", (("InputTensor", input), ("IndicesTensor", indices)))
    key = (input.shape, indices.shape, input.dtype, indices.dtype, batch_dims,
           input_dimension_count, indices_dimension_count, level)
    lay = _gather_memo.get(key)
    if lay is None:
        lay = _check_gather_nd(input, indices, batch_dims, input_dimension_count,
                               indices_dimension_count, level)
        _gather_memo.put(key, lay)
    check_dense("gather_nd", (("InputTensor", input), ("IndicesTensor", indices)))
    return lay


def _check_gather_nd(input, indices, batch_dims, input_dimension_count, indices_dimension_count,
                     level) -> GatherLayout:
    op = "gather_nd"
    check_level_argument(level)
    check_data_dtype(op, "InputTensor", input.dtype, level)
    check_index_dtype(op, "IndicesTensor", indices.dtype, level)
    lay = gather_layout(op, input.shape, indices.shape, batch_dims, input_dimension_count,
                        indices_dimension_count)
    if level != PERMISSIVE:
        if lay.dml_form:
            check_dml_dimension_count(op, ("InputTensor", "IndicesTensor"),
                                      (input.dim(), indices.dim()), level, FULL_RANK_FROM[op])
        else:
            check_natural_ranks(op, ("InputTensor", "IndicesTensor", "OutputTensor"),
                                (input.dim(), indices.dim(), len(lay.out_shape)), level,
                                FULL_RANK_FROM[op])
        # spec DML_GATHER_ND.md Remarks: BatchDimensionCount belongs to DML_GATHER_ND1, which
        # was introduced in DML_FEATURE_LEVEL_3_0.
        if batch_dims != 0 and not level_at_least(level, BATCH_DIMS_FROM):
            raise ConstraintError(message("batch_dims_level", op=op, batch_dims=batch_dims,
                                          since=level_name(BATCH_DIMS_FROM),
                                          level=level_name(level)))
    return lay


_scatter_memo = _Memo()


def check_scatter_nd(input: torch.Tensor, indices: torch.Tensor, updates: torch.Tensor,
                     reduction: str, input_dimension_count: Optional[int],
                     indices_dimension_count: Optional[int], level: str,
                     check_indices: bool = True, deterministic: bool = False,
                     op: str = "scatter_nd") -> GatherLayout:
    """Every metadata rule of DML_SCATTER_ND at ``level``; returns the layout (``out_shape`` is
    the shape UpdatesTensor must have).  ``op`` names the caller in messages (``scatter_nd_``
    for the in-place variant)."""
    if not (type(reduction) is str and input_dimension_count is None
            and indices_dimension_count is None and type(level) is str
            and type(check_indices) is bool and type(deterministic) is bool
            and isinstance(input, torch.Tensor) and isinstance(indices, torch.Tensor)
            and isinstance(updates, torch.Tensor)):      # else the detailed checks (M8)
        check_arg_types(op, ("tensor", "InputTensor", input), ("tensor", "IndicesTensor", indices),
                        ("tensor", "UpdatesTensor", updates), ("str", "reduction", reduction),
                        ("int?", "input_dimension_count", input_dimension_count),
                        ("int?", "indices_dimension_count", indices_dimension_count),
                        ("str", "feature_level", level), ("bool", "check_indices", check_indices),
                        ("bool", "deterministic", deterministic))
    if input.device != indices.device or input.device != updates.device:
        check_same_device(op, (("InputTensor", input), ("IndicesTensor", indices),
                               ("UpdatesTensor", updates)))
    key = (input.shape, indices.shape, updates.shape, input.dtype, indices.dtype, updates.dtype,
           reduction, input_dimension_count, indices_dimension_count, level, op)
    lay = _scatter_memo.get(key)
    if lay is None:
        lay = _check_scatter_nd(input, indices, updates, reduction, input_dimension_count,
                                indices_dimension_count, level, op)
        _scatter_memo.put(key, lay)
    check_dense(op, (("InputTensor", input), ("IndicesTensor", indices),
                     ("UpdatesTensor", updates)))
    return lay


def _check_scatter_nd(input, indices, updates, reduction, input_dimension_count,
                      indices_dimension_count, level, op) -> GatherLayout:
    check_level_argument(level)
    if reduction not in REDUCTIONS:
        raise ValueError(message("reduction_choice", op=op, reduction=repr(reduction),
                                 choices=", ".join(map(repr, REDUCTIONS))))
    check_data_dtype(op, "InputTensor", input.dtype, level)
    # spec DML_SCATTER_ND.md "Tensor constraints": Input, Output and Updates share one DataType.
    if updates.dtype != input.dtype:
        raise ConstraintTypeError(message("updates_dtype", op=op, dtype=updates.dtype,
                                          input_dtype=input.dtype))
    check_index_dtype(op, "IndicesTensor", indices.dtype, level)
    # ONNX ScatterND: the index tuples may be empty (k = 0, each update is the whole input).
    lay = gather_layout(op, input.shape, indices.shape, 0, input_dimension_count,
                        indices_dimension_count, updates_name="UpdatesTensor", min_tuple_size=0)
    if lay.dml_form and updates.dim() != input.dim():
        raise ConstraintError(message("dml_rank_equal", op=op, name="UpdatesTensor",
                                      first="InputTensor", rank=input.dim(), got=updates.dim()))
    # spec DML_SCATTER_ND.md UpdatesTensor: Sizes = indices' leading segment + input's trailing
    # segment (spec README 1: the segment after the indexed dimensions), right-aligned.
    if tuple(updates.shape) != tuple(lay.out_shape):
        raise ConstraintError(message(
            "updates_shape", op=op, want=tuple(lay.out_shape),
            leading=tuple(lay.natural_indices_shape[:-1]), trailing=tuple(lay.slice_shape),
            got=tuple(updates.shape)))
    if level != PERMISSIVE:
        if lay.dml_form:
            check_dml_dimension_count(op, ("InputTensor", "IndicesTensor", "UpdatesTensor"),
                                      (input.dim(), indices.dim(), updates.dim()), level,
                                      FULL_RANK_FROM["scatter_nd"])
        else:
            check_natural_ranks(op, ("InputTensor", "IndicesTensor", "UpdatesTensor"),
                                (input.dim(), indices.dim(), updates.dim()), level,
                                      FULL_RANK_FROM["scatter_nd"])
        if reduction != "none":
            raise ConstraintError(message("reduction_level", op=op, reduction=repr(reduction),
                                          level=level_name(level)))
    return lay


# ---------------------------------------------------------------------------------------------
# top_k1
# ---------------------------------------------------------------------------------------------

_topk_memo = _Memo()


def check_top_k1(input: torch.Tensor, k: int, axis: int, direction: str,
                 index_dtype: torch.dtype, level: str) -> int:
    """Every metadata rule of DML_TOP_K1 at ``level``; returns the axis, made non-negative."""
    if not (type(k) is int and type(axis) is int and type(direction) is str
            and type(index_dtype) is torch.dtype and type(level) is str
            and isinstance(input, torch.Tensor)):        # else the detailed checks (M8)
        check_arg_types("top_k1", ("tensor", "InputTensor", input), ("int", "k", k),
                        ("int", "axis", axis), ("str", "direction", direction),
                        ("dtype", "index_dtype", index_dtype), ("str", "feature_level", level))
    key = (input.shape, input.dtype, k, axis, direction, index_dtype, level)
    ax = _topk_memo.get(key)
    if ax is None:
        ax = _check_top_k1(input, k, axis, direction, index_dtype, level)
        _topk_memo.put(key, ax)
    check_dense("top_k1", (("InputTensor", input),))
    return ax


def _check_top_k1(input, k, axis, direction, index_dtype, level) -> int:
    op = "top_k1"
    check_level_argument(level)
    if direction not in DIRECTIONS:
        raise ValueError(message("direction_choice", op=op, direction=repr(direction),
                                 choices=" or ".join(map(repr, DIRECTIONS))))
    check_data_dtype(op, "InputTensor", input.dtype, level)
    if index_dtype not in TOPK_INDEX_DTYPES:
        raise ConstraintTypeError(message("topk_index_dtype", op=op, index_dtype=index_dtype,
                                          supported=type_list(TOPK_INDEX_DTYPES)))
    r = input.dim()
    if r < 1:
        raise ConstraintError(message("input_rank", op=op, shape=tuple(input.shape)))
    if not -r <= axis < r:
        raise ConstraintIndexError(message("topk_axis", op=op, axis=axis, rank=r, lo=-r,
                                           hi=r - 1))
    ax = axis % r
    n = input.shape[ax]
    if n == 0:
        raise ConstraintError(message("topk_empty_axis", op=op, axis=ax, shape=tuple(input.shape),
                                      k=k))
    if not 1 <= k <= n:
        raise ConstraintError(message("topk_k", op=op, n=n, axis=ax, k=k))
    # Every index along the axis must be representable in the OutputIndexTensor's type.
    top = INDEX_LIMITS[index_dtype]
    if n - 1 > top:
        raise ConstraintError(message("topk_index_limit", op=op, n=n, axis=ax,
                                      index_dtype=index_dtype, top=top, limit=top + 1))
    if level != PERMISSIVE:
        check_natural_ranks(op, ("InputTensor",), (r,), level, FULL_RANK_FROM[op])
        if index_dtype != torch.uint32:
            raise ConstraintTypeError(message("topk_index_level", op=op, index_dtype=index_dtype,
                                              level=level_name(level)))
    return ax
