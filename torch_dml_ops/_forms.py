"""Natural <-> DML (padded) form normalisation and output-shape arithmetic.

Natural form: tensors carry only their meaningful dimensions (ONNX / TensorFlow / JAX).
DML form: every tensor has the same DimensionCount N, padded on the left with 1s; the
``*_dimension_count`` arguments say how many trailing dimensions are meaningful, and results are
right-aligned into N dimensions (spec README, "The two ways to call an operator").

Shapes here may hold SymInts (dynamic shapes under torch.compile): only arithmetic and comparisons
are used, which guard as needed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Sequence

from ._errors import ConstraintError, message


def prod(xs) -> int:
    p = 1
    for x in xs:
        p = p * x
    return p


def row_major_strides(sizes: Sequence[int]) -> list:
    """The element strides of a contiguous tensor of ``sizes`` (the one place they are computed)."""
    strides, s = [], 1
    for n in reversed(list(sizes)):
        strides.append(s)
        s = s * n
    return strides[::-1]


def strip_padding(op: str, name: str, count_name: str, shape: Sequence[int], count: int) -> tuple:
    """The meaningful trailing ``count`` dims of a DML-form shape; the dropped ones must be 1."""
    n = len(shape)
    # spec DML_GATHER_ND.md / spec README 2: the count ranges over [1, DimensionCount].
    if not 1 <= count <= n:
        raise ConstraintError(message("count_range", op=op, count_name=count_name, name=name, n=n,
                                      count=count))
    lead = tuple(shape[: n - count])
    for d, s in enumerate(lead):
        if s != 1:
            raise ConstraintError(message("padding_size", op=op, name=name, size=s, dim=d,
                                          count_name=count_name, count=count,
                                          shape=tuple(shape)))
    return tuple(shape[n - count:])


def right_align(op: str, name: str, shape: tuple, n: int) -> tuple:
    """Pad a natural-form result with leading 1s to DimensionCount ``n``."""
    if len(shape) > n:
        raise ConstraintError(message("result_rank", op=op, name=name, rank=len(shape),
                                      shape=tuple(shape), n=n))
    return (1,) * (n - len(shape)) + tuple(shape)


def dml_form(op: str, input_dimension_count: Optional[int],
             indices_dimension_count: Optional[int]) -> bool:
    """Whether a gather / scatter call is in the DML form (both counts given; one alone is an
    error)."""
    if input_dimension_count is None and indices_dimension_count is None:
        return False
    if input_dimension_count is None or indices_dimension_count is None:
        raise ConstraintError(message("dml_both_counts", op=op, input_count=input_dimension_count,
                                      indices_count=indices_dimension_count))
    return True


@dataclass(frozen=True)
class GatherLayout:
    """Where a gather_nd / scatter_nd call reads and writes, in the natural form.

    ``input`` is viewed as ``[batch, *index_sizes, *slice_shape]`` and ``indices`` as
    ``[batch, tuples_per_batch, k]``; tuple t of batch b selects the slice
    ``input[b, idx[b, t, 0], ..., idx[b, t, k-1]]``.  The derived sizes are computed once (layouts
    are memoized per shape), since the kernels read them on every call.
    """
    dml_form: bool
    natural_input_shape: tuple
    natural_indices_shape: tuple
    batch_dims: int
    k: int
    out_shape: tuple            # what the op returns (padded in the DML form)
    natural_out_shape: tuple
    batch: int = field(init=False)
    index_sizes: tuple = field(init=False)
    slice_shape: tuple = field(init=False)
    slice_len: int = field(init=False)
    n_tuples: int = field(init=False)
    rows: int = field(init=False)            # batch * prod(index_sizes)

    def __post_init__(self) -> None:
        b, k, shape = self.batch_dims, self.k, self.natural_input_shape
        derived: Dict[str, Any] = dict(batch=prod(shape[:b]), index_sizes=tuple(shape[b:b + k]),
                       slice_shape=tuple(shape[b + k:]), slice_len=prod(shape[b + k:]),
                       n_tuples=prod(self.natural_indices_shape[:-1]))
        derived["rows"] = derived["batch"] * prod(derived["index_sizes"])
        for name, value in derived.items():
            object.__setattr__(self, name, value)

    def dim_names(self, input_rank: int) -> list:
        """Names of the indexed input dimensions, numbered as the caller's tensor has them."""
        pad = input_rank - len(self.natural_input_shape)
        return [f"InputTensor dimension {d + pad}"
                for d in range(self.batch_dims, self.batch_dims + self.k)]


def gather_layout(op: str, input_shape: Sequence[int], indices_shape: Sequence[int], batch_dims: int,
                  input_dimension_count: Optional[int], indices_dimension_count: Optional[int],
                  updates_name: Optional[str] = None, min_tuple_size: int = 1) -> GatherLayout:
    """Normalise a gather_nd / scatter_nd call and compute its (natural and returned) result shape.

    ``updates_name`` names the tensor whose shape the formula gives (``OutputTensor`` for gather,
    ``UpdatesTensor`` for scatter) in error messages.  ``min_tuple_size``: the smallest index
    tuple (GatherND 1, ScatterND 0: a tuple of size 0 addresses the whole input).
    """
    result_name = updates_name or "OutputTensor"
    input_shape = tuple(input_shape)
    indices_shape = tuple(indices_shape)
    dml = dml_form(op, input_dimension_count, indices_dimension_count)
    if dml:
        assert input_dimension_count is not None and indices_dimension_count is not None
        n = len(input_shape)
        if len(indices_shape) != n:
            raise ConstraintError(message("dml_indices_rank", op=op, rank=n,
                                          got=len(indices_shape), shape=indices_shape))
        nat_in = strip_padding(op, "InputTensor", "input_dimension_count", input_shape,
                               input_dimension_count)
        nat_idx = strip_padding(op, "IndicesTensor", "indices_dimension_count", indices_shape,
                                indices_dimension_count)
    else:
        nat_in, nat_idx = input_shape, indices_shape

    r, q = len(nat_in), len(nat_idx)
    if r < 1:
        raise ConstraintError(message("input_rank", op=op, shape=nat_in))
    if q < 1:
        raise ConstraintError(message("indices_rank", op=op, shape=nat_idx))
    if not isinstance(batch_dims, int) or batch_dims < 0 or batch_dims >= min(q, r):
        raise ConstraintError(message("batch_dims_range", op=op, q=q, r=r, batch_dims=batch_dims))
    k = int(nat_idx[-1])
    # spec DML_GATHER_ND.md / DML_SCATTER_ND.md: the tuple size "cannot exceed" ("mustn't
    # exceed") InputTensor.DimensionCount; no lower bound.  ONNX GatherND: 1 <= k <= r -
    # batch_dims; ONNX ScatterND: k <= r, and k = 0 makes every update the whole input.
    if not min_tuple_size <= k <= r - batch_dims:
        raise ConstraintError(message("tuple_size", op=op, lo=min_tuple_size, hi=r - batch_dims,
                                      r=r, batch_dims=batch_dims, k=k, shape=indices_shape))
    for d in range(batch_dims):
        if nat_idx[d] != nat_in[d]:
            raise ConstraintError(message("batch_dim_differs", op=op, d=d,
                                          indices_size=nat_idx[d], input_size=nat_in[d],
                                          batch_dims=batch_dims))
    # spec README 1: the trailing segment starts after the indexed dimensions.
    nat_out = tuple(nat_idx[:-1]) + tuple(nat_in[batch_dims + k:])
    out_shape = right_align(op, result_name, nat_out, len(input_shape)) if dml else nat_out
    return GatherLayout(dml, tuple(nat_in), tuple(nat_idx), batch_dims, k, out_shape, nat_out)


def backward_layout(grad_shape: Sequence[int], indices_shape: Sequence[int],
                    index_sizes: Sequence[int], batch_dims: int,
                    input_dimension_count: Optional[int],
                    indices_dimension_count: Optional[int]) -> tuple:
    """gather_nd_backward's call: ``(input_shape, layout)`` of the forward gather.

    The op takes the sizes of the k indexed input dimensions only; the batch and trailing
    dimensions are ``grad``'s (a gather output is ``indices.shape[:-1] + input.shape[b+k:]``).
    So the op carries no global shape, and a sharding rule can shard ``grad`` on a batch or
    trailing dimension: the local call derives its local input shape.  Same checks and messages
    as the C++ kernel (csrc/checks.cpp, backward_layout).
    """
    op = "gather_nd_backward"
    grad_shape, indices_shape = tuple(grad_shape), tuple(indices_shape)
    index_sizes = tuple(index_sizes)
    b = batch_dims
    if not indices_shape:
        raise ConstraintError(message("indices_rank", op="gather_nd", shape=indices_shape))
    n = len(indices_shape)
    dml = dml_form("gather_nd", input_dimension_count, indices_dimension_count)
    if dml:
        assert input_dimension_count is not None and indices_dimension_count is not None
        nat_idx = strip_padding("gather_nd", "IndicesTensor", "indices_dimension_count",
                                indices_shape, indices_dimension_count)
        # its range (the input has the indices' DimensionCount): strip_padding's own check
        strip_padding("gather_nd", "InputTensor", "input_dimension_count", (1,) * n,
                      input_dimension_count)
    else:
        nat_idx = indices_shape
    q, k = len(nat_idx), nat_idx[-1]
    if not isinstance(b, int) or not 0 <= b < q:
        raise ConstraintError(message("batch_dims_range_backward", op="gather_nd", q=q,
                                      batch_dims=b))
    if len(index_sizes) != k or any(s < 0 for s in index_sizes):
        raise ConstraintError(message("index_sizes", op=op, k=k, sizes=list(index_sizes)))
    if dml:
        assert input_dimension_count is not None    # dml_form: both counts given
        trailing = input_dimension_count - b - k
        if trailing < 0:
            raise ConstraintError(message("tuple_size", op="gather_nd", lo=1,
                                          hi=input_dimension_count - b, r=input_dimension_count,
                                          batch_dims=b, k=k, shape=indices_shape))
        nat_rank = q - 1 + trailing
        nat_grad = grad_shape[len(grad_shape) - nat_rank:] if nat_rank <= len(grad_shape) else None
    else:
        nat_grad = grad_shape
    if nat_grad is None or tuple(nat_grad[:q - 1]) != tuple(nat_idx[:-1]):
        raise ConstraintError(message("grad_not_output", op=op, shape=grad_shape,
                                      indices_shape=indices_shape, leading=tuple(nat_idx[:-1])))
    nat_in = tuple(nat_grad[:b]) + index_sizes + tuple(nat_grad[q - 1:])
    input_shape = (1,) * (n - len(nat_in)) + nat_in if dml else nat_in
    if 0 not in input_shape and prod(input_shape) > 2**63 - 1:
        raise ConstraintError(message("grad_too_big", op=op, sizes=list(index_sizes),
                                      shape=grad_shape, input_shape=input_shape))
    lay = gather_layout("gather_nd", input_shape, indices_shape, b, input_dimension_count,
                        indices_dimension_count)
    if tuple(grad_shape) != tuple(lay.out_shape):
        raise ConstraintError(message("grad_shape", op=op, shape=grad_shape,
                                      want=tuple(lay.out_shape), input_shape=input_shape,
                                      indices_shape=indices_shape))
    return input_shape, lay


def indexed_sizes(input_shape: Sequence[int], indices_shape: Sequence[int], batch_dims: int,
                  input_dimension_count: Optional[int]) -> list:
    """The sizes of a (valid) gather's k indexed input dimensions: gather_nd_backward's
    ``index_sizes``."""
    n = len(input_shape)
    start = n - (input_dimension_count if input_dimension_count is not None else n) + batch_dims
    return list(input_shape[start:start + indices_shape[-1]])
