"""The one home of the library's tables and constants (dtypes per feature level, reductions,
directions, index limits, the no-error sentinel).  The C++ kernels hold the same tables
(``csrc/checks.cpp``); :func:`check_cpp_tables` compares the two when the extension loads.
"""
from __future__ import annotations

import torch


# spec DML_GATHER_ND.md / DML_SCATTER_ND.md / DML_TOP_K1.md, "Tensor support": the same eight data
# types at every level.
DML_DATA_DTYPES = (
    torch.float32, torch.float16, torch.int32, torch.int16, torch.int8,
    torch.uint32, torch.uint16, torch.uint8,
)
#: What the permissive level accepts: DML's types plus the ones torch users have.
DATA_DTYPES = DML_DATA_DTYPES + (torch.float64, torch.bfloat16, torch.int64, torch.uint64,
                                 torch.bool)
#: spec DML_GATHER_ND.md, IndicesTensor at FEATURE_LEVEL_3_0 and above.
INDEX_DTYPES = (torch.int64, torch.int32, torch.uint64, torch.uint32)
#: spec DML_GATHER_ND.md, IndicesTensor at FEATURE_LEVEL_2_1.
INDEX_DTYPES_2_1 = (torch.uint32,)
SIGNED_INDEX_DTYPES = (torch.int64, torch.int32)

_DML_TYPE_NAMES = {
    torch.float32: "FLOAT32", torch.float16: "FLOAT16", torch.float64: "FLOAT64",
    torch.bfloat16: "BFLOAT16 (no DML equivalent)", torch.int64: "INT64", torch.int32: "INT32",
    torch.int16: "INT16", torch.int8: "INT8", torch.uint64: "UINT64", torch.uint32: "UINT32",
    torch.uint16: "UINT16", torch.uint8: "UINT8", torch.bool: "BOOL (no DML equivalent)",
}

#: ScatterND reductions: DML_SCATTER_ND's overwrite ("none") and ONNX ScatterND-18's four.
REDUCTIONS = ("none", "add", "mul", "max", "min")
#: DML_TOP_K1's AxisDirection.
DIRECTIONS = ("decreasing", "increasing")
#: spec DML_TOP_K1.md OutputIndexTensor: UINT32; int64 and int32 are torch-friendly extras.
TOPK_INDEX_DTYPES = (torch.int64, torch.int32, torch.uint32)
#: The largest index each top_k1 index dtype holds.
INDEX_LIMITS = {torch.int64: 2**63 - 1, torch.int32: 2**31 - 1, torch.uint32: 2**32 - 1}
#: "No bad index found": what the kernels' first-bad-position searches return otherwise.
NO_ERROR = 2**63 - 1
#: The most parallel parts a C++ kernel splits a call into (per-part scratch is sized by it).
MAX_THREADS = 64


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


def expected_cpp_tables() -> str:
    """These tables as ``torch.ops.torch_dml_ops._tables()`` reports the C++ side's."""
    data = "".join(f"{_name(d)}{'+dml' if d in DML_DATA_DTYPES else ''}," for d in DATA_DTYPES)
    index = "".join(f"{_name(d)}," for d in INDEX_DTYPES)
    return f"data:{data};index:{index};no_error:{NO_ERROR};max_threads:{MAX_THREADS}"


def check_cpp_tables(reported: str) -> None:
    """Refuse a C++ extension whose tables differ from these (a stale or mismatched build)."""
    want = expected_cpp_tables()
    if reported != want:
        raise ImportError(
            f"torch_dml_ops: the C++ extension's tables differ from the Python ones (a stale "
            f"build? rebuild with pip install --no-build-isolation -e .):\n  C++:    {reported}"
            f"\n  Python: {want}")
