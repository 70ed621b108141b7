"""The library's tables and constants as torch objects (dtypes per feature level, reductions,
directions, index limits, the no-error sentinel).  The dtype tables and the constants the C++
kernels share are written once, in ``_data`` (plain data the C++ build generates its copy from).
"""
from __future__ import annotations

import torch

from . import _data

_DTYPE = {name: getattr(torch, name) for name, _, _, _ in _data.DTYPES}

#: DirectML's data types (the same eight at every level).
DML_DATA_DTYPES = tuple(_DTYPE[name] for name, _, _, dml in _data.DTYPES if dml)
#: What the permissive level accepts: DML's types plus the ones torch users have.
DATA_DTYPES = DML_DATA_DTYPES + tuple(_DTYPE[name] for name, _, _, dml in _data.DTYPES if not dml)
#: spec DML_GATHER_ND.md, IndicesTensor at FEATURE_LEVEL_3_0 and above.
INDEX_DTYPES = tuple(getattr(torch, name) for name in _data.INDEX_DTYPES)
#: spec DML_GATHER_ND.md, IndicesTensor at FEATURE_LEVEL_2_1.
INDEX_DTYPES_2_1 = tuple(getattr(torch, name) for name in _data.INDEX_DTYPES_2_1)
SIGNED_INDEX_DTYPES = (torch.int64, torch.int32)

_DML_TYPE_NAMES = {_DTYPE[name]: dml_name for name, _, dml_name, _ in _data.DTYPES}

#: ScatterND reductions: DML_SCATTER_ND's overwrite ("none") and ONNX ScatterND-18's four.
REDUCTIONS = _data.REDUCTIONS
#: DML_TOP_K1's AxisDirection.
DIRECTIONS = _data.DIRECTIONS
#: top_k1's index dtypes (spec DML_TOP_K1.md OutputIndexTensor: UINT32; int64 and int32 extra).
TOPK_INDEX_DTYPES = tuple(getattr(torch, name) for name in _data.TOPK_INDEX_DTYPES)
#: The largest index each top_k1 index dtype holds.
INDEX_LIMITS = {torch.int64: 2**63 - 1, torch.int32: 2**31 - 1, torch.uint32: 2**32 - 1}
#: "No bad index found": what the kernels' first-bad-position searches return otherwise.
NO_ERROR = _data.NO_ERROR
#: The most parallel parts a C++ kernel splits a call into (per-part scratch is sized by it).
MAX_THREADS = _data.MAX_THREADS


#: The signed integer type of each element width: data moved as raw bits (copies, gathers) goes
#: through it, so every dtype moves bit-exactly, NaN payloads included (torch's CPU gather of
#: float16/bfloat16 goes through float32 and quiets signalling NaNs: 0x7C01 -> 0x7E01).
SAME_WIDTH_INT = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits_view(t: torch.Tensor) -> torch.Tensor:
    """``t`` reinterpreted as the signed integer type of its width (the one place it is done)."""
    if t.dtype == torch.bool:
        return t.view(torch.uint8).view(torch.int8)
    return t.view(SAME_WIDTH_INT[t.element_size()])


def _name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def type_list(dtypes) -> str:
    """``"float32, float16"``: dtypes as the error messages list them."""
    return ", ".join(_name(d) for d in dtypes)


def dml_type_name(dtype: torch.dtype) -> str:
    return _DML_TYPE_NAMES.get(dtype, str(dtype))
