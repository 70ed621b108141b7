"""The ONNX translations of the ops: onnxscript functions, traced by torch's exporter.

Each function receives the op's arguments as the exporter hands them over: tensors as symbolic
values (with ``.dtype``, an ``onnx_ir.DataType``, and ``.shape``), the other arguments as Python
values.  Every translation is exact for the dtypes it accepts (checked bit for bit against eager
in ``tests/test_onnx.py``); where onnxruntime has no kernel, it widens exactly, and where no exact
widening exists it raises ``OnnxExportError`` at export time instead of exporting a graph that
would compute something else.
"""
from __future__ import annotations

from typing import Optional

import onnx_ir as ir
import torch
from onnxscript import opset18 as op

from .._errors import ConstraintError

OPSET = 18

_T = ir.DataType
#: ONNX TensorProto codes used in Cast.
_INT64, _INT32, _UINT32, _UINT8, _FLOAT, _DOUBLE, _BOOL = (
    _T.INT64.value, _T.INT32.value, _T.UINT32.value, _T.UINT8.value, _T.FLOAT.value,
    _T.DOUBLE.value, _T.BOOL.value)
_INT64_MAX = 2**63 - 1
_DOUBLE_MAX = 1.7976931348623157e308


class OnnxExportError(ConstraintError):
    """A call that no standard ONNX graph computes exactly: raised at export time (a
    ``ValueError``, like the library's other constraint errors), never a silently different
    model."""


def _dtype_name(value) -> str:
    return value.dtype.name.lower() if value.dtype is not None else "unknown"


def _indices_int64(indices):
    """ONNX's GatherND/ScatterND take int64 indices.  int32/uint32 cast exactly; a uint64 index
    of 2**63 or more (out of range, never negative, in our semantics) becomes INT64_MAX, which
    onnxruntime rejects as out of range instead of reading it as a negative index."""
    dt = indices.dtype
    if dt == _T.INT64:
        return indices
    if dt == _T.UINT64:
        high = op.Cast(op.BitShift(indices, op.Constant(value=ir.tensor(63, dtype=_T.UINT64)),
                                   direction="RIGHT"), to=_INT64)
        return op.Where(op.Equal(high, op.Constant(value_int=1)),
                        op.Constant(value_int=_INT64_MAX), op.Cast(indices, to=_INT64))
    return op.Cast(indices, to=_INT64)


def _static_rank(value, what: str) -> int:
    if value.shape is None:
        raise OnnxExportError(f"{what}: the rank must be known at export time")
    return len(value.shape)


def _static_k(indices, op_name: str) -> int:
    k = indices.shape[-1] if indices.shape is not None and len(indices.shape) else None
    if not isinstance(k, int):
        raise OnnxExportError(
            f"{op_name}: IndicesTensor's last dimension (the index-tuple size) must be static for "
            f"ONNX export, got {k!r}: it fixes the output rank; do not mark it dynamic")
    return k


def _squeeze_leading(x, n_lead: int):
    if n_lead == 0:
        return x
    return op.Squeeze(x, op.Constant(value_ints=list(range(n_lead))))


def _unsqueeze_leading(x, n_lead: int):
    if n_lead == 0:
        return x
    return op.Unsqueeze(x, op.Constant(value_ints=list(range(n_lead))))


def gather_nd(input, indices, batch_dims: int = 0, input_dimension_count: Optional[int] = None,
              indices_dimension_count: Optional[int] = None, feature_level: str = "permissive",
              check_indices: bool = True):
    """GatherND (opset 12+ for batch_dims); the DML form squeezes its padding dimensions first and
    right-aligns the result into the inputs' DimensionCount after."""
    idx = _indices_int64(indices)
    if input_dimension_count is None:
        return op.GatherND(input, idx, batch_dims=batch_dims)
    n = _static_rank(input, "gather_nd")
    k = _static_k(indices, "gather_nd")
    nat_input = _squeeze_leading(input, n - input_dimension_count)
    nat_idx = _squeeze_leading(idx, n - indices_dimension_count)
    out = op.GatherND(nat_input, nat_idx, batch_dims=batch_dims)
    out_rank = (indices_dimension_count - 1) + (input_dimension_count - batch_dims - k)
    return _unsqueeze_leading(out, n - out_rank)


def _scatter_dtype_plan(dtype, reduction: str):
    """(compute dtype or None for the data's own, note): how ScatterND runs this dtype exactly in
    onnxruntime's CPU provider (opset 18).  bool: none natively; add (= or) and max through uint8
    max, mul (= and) and min through uint8 min.  float16/bfloat16: none natively; max/min through
    float32 (exact: the widened max is the max); add/mul refused."""
    if dtype == _T.BOOL:
        if reduction == "none":
            return None, reduction
        return _UINT8, {"add": "max", "mul": "min"}.get(reduction, reduction)
    if dtype in (_T.FLOAT16, _T.BFLOAT16):
        if reduction == "none":
            return None, reduction
        if reduction in ("max", "min"):
            return _FLOAT, reduction
        raise OnnxExportError(
            f"scatter_nd: reduction={reduction!r} on {dtype.name.lower()} data has no exact ONNX "
            f"translation: onnxruntime has no {dtype.name.lower()} ScatterND kernel for it, and "
            f"widening to float32 rounds each duplicate's sum once more than eager does; cast the "
            f"data to float32 in the model, or use reduction 'none', 'max' or 'min'")
    return None, reduction


_FLOATS = (_T.FLOAT, _T.FLOAT16, _T.BFLOAT16, _T.DOUBLE)


def _scatter(data, idx, updates, reduction: str):
    dtype = data.dtype
    compute, red = _scatter_dtype_plan(dtype, reduction)
    if compute is not None:
        d, u = op.Cast(data, to=compute), op.Cast(updates, to=compute)
    else:
        d, u = data, updates
    out = op.ScatterND(d, idx, u, reduction=red)
    if dtype in _FLOATS and red in ("max", "min"):
        # onnxruntime's max/min drop a NaN that eager propagates: a slot is NaN when it was, or
        # when any update it receives is.  The flags combine with the same ScatterND (max of 0/1).
        nan_in = op.Cast(op.IsNaN(d), to=_UINT8)
        nan_up = op.Cast(op.IsNaN(u), to=_UINT8)
        nan_out = op.Cast(op.ScatterND(nan_in, idx, nan_up, reduction="max"), to=_BOOL)
        nan = ir.tensor(float("nan"), dtype=_T.FLOAT if compute is not None else dtype)
        out = op.Where(nan_out, op.Constant(value=nan), out)
    if compute is not None:
        out = op.Cast(out, to=dtype.value)
    return out


def scatter_nd(input, indices, updates, reduction: str = "none",
               input_dimension_count: Optional[int] = None,
               indices_dimension_count: Optional[int] = None, feature_level: str = "permissive",
               check_indices: bool = True, deterministic: bool = False):
    """ScatterND(reduction) (add/mul need opset 16, max/min 18).  onnxruntime applies the tuples
    in index order, so duplicates resolve as eager's deterministic mode (the last one wins)."""
    idx = _indices_int64(indices)
    if input_dimension_count is None:
        return _scatter(input, idx, updates, reduction)
    n = _static_rank(input, "scatter_nd")
    k = _static_k(indices, "scatter_nd")
    nat_input = _squeeze_leading(input, n - input_dimension_count)
    nat_idx = _squeeze_leading(idx, n - indices_dimension_count)
    updates_rank = (indices_dimension_count - 1) + (input_dimension_count - k)
    nat_updates = _squeeze_leading(updates, n - updates_rank)
    out = _scatter(nat_input, nat_idx, nat_updates, reduction)
    return op.Reshape(out, op.Shape(input))


# top_k1 ---------------------------------------------------------------------------------------

#: dtypes onnxruntime's TopK takes as they are.
_TOPK_NATIVE = (_T.INT64, _T.INT32, _T.INT16, _T.INT8, _T.UINT8)
#: exact, order-preserving integer widenings.
_TOPK_WIDEN = {_T.UINT16: _INT32, _T.UINT32: _INT64, _T.BOOL: _UINT8}


def _topk_key(input):
    """An order-preserving key onnxruntime's TopK sorts like eager top_k1 sorts ``input``."""
    dt = input.dtype
    if dt in _TOPK_NATIVE:
        return input, False
    if dt in _TOPK_WIDEN:
        return op.Cast(input, to=_TOPK_WIDEN[dt]), True
    if dt in _FLOATS:
        # Eager orders NaN above +inf in both directions and -0.0 equal to +0.0.  In float64,
        # +inf becomes DOUBLE_MAX and NaN +inf: every float32/float16/bfloat16 value keeps its
        # place, and NaN sorts above all.  (float64 data: see docs/onnx.md, known differences.)
        x = op.Cast(input, to=_DOUBLE)
        pinf = op.Constant(value=ir.tensor(float("inf"), dtype=_T.DOUBLE))
        x = op.Where(op.Equal(x, pinf), op.Constant(value=ir.tensor(_DOUBLE_MAX, dtype=_T.DOUBLE)), x)
        x = op.Where(op.IsNaN(x), pinf, x)
        return x, True
    raise OnnxExportError(
        f"top_k1: InputTensor of dtype {_dtype_name(input)} has no exact ONNX translation: "
        f"onnxruntime's TopK has no kernel for it and no order-preserving widening fits in int64")


def top_k1(input, k: int, axis: int = -1, direction: str = "decreasing", index_dtype=None,
           feature_level: str = "permissive"):
    """TopK(axis, largest, sorted=1): ONNX orders equal values by lower index first (verified in
    onnxruntime by the tests).  Values of a widened key are gathered back from the input."""
    key, widened = _topk_key(input)
    largest = 1 if direction == "decreasing" else 0
    values, idx = op.TopK(key, op.Constant(value_ints=[k]), axis=axis, largest=largest, sorted=1)
    if widened:
        values = op.GatherElements(input, idx, axis=axis)
    if index_dtype is not None:
        code = _torch_index_code(index_dtype)
        if code != _INT64:
            idx = op.Cast(idx, to=code)
    return values, idx


def _torch_index_code(index_dtype) -> int:
    """The exporter hands a ScalarType argument over as an ``onnx_ir.DataType``."""
    if isinstance(index_dtype, ir.DataType):
        return index_dtype.value
    return {torch.int64: _INT64, torch.int32: _INT32, torch.uint32: _UINT32}[index_dtype]
