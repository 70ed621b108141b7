"""The library's dtype tables and constants, written once.

Plain data, no imports, like ``_schemas``: ``setup.py`` reads this file (without importing the
package or torch) and generates the C++ copy the kernels' checks use (``tdo_data.inc`` in the
build folder); ``_tables`` builds the torch-facing tables from it.
"""

#: Every data type the library knows, in the order the error messages list them:
#: (torch name, c10::ScalarType enumerator, DirectML name, whether DirectML has it).
#: spec DML_GATHER_ND.md / DML_SCATTER_ND.md / DML_TOP_K1.md, "Tensor support": the same eight
#: DirectML types at every level; the permissive level also takes the ones torch users have.
DTYPES = (
    ("float32", "Float", "FLOAT32", True),
    ("float16", "Half", "FLOAT16", True),
    ("int32", "Int", "INT32", True),
    ("int16", "Short", "INT16", True),
    ("int8", "Char", "INT8", True),
    ("uint32", "UInt32", "UINT32", True),
    ("uint16", "UInt16", "UINT16", True),
    ("uint8", "Byte", "UINT8", True),
    ("float64", "Double", "FLOAT64", False),
    ("bfloat16", "BFloat16", "BFLOAT16 (no DML equivalent)", False),
    ("int64", "Long", "INT64", False),
    ("uint64", "UInt64", "UINT64", False),
    ("bool", "Bool", "BOOL (no DML equivalent)", False),
)
#: spec DML_GATHER_ND.md, IndicesTensor at FEATURE_LEVEL_3_0 and above (torch names).
INDEX_DTYPES = ("int64", "int32", "uint64", "uint32")
#: spec DML_GATHER_ND.md, IndicesTensor at FEATURE_LEVEL_2_1.
INDEX_DTYPES_2_1 = ("uint32",)
#: "No bad index found": what the kernels' first-bad-position searches return otherwise.
NO_ERROR = 2**63 - 1
#: The most parallel parts a C++ kernel splits a call into (per-part scratch is sized by it).
MAX_THREADS = 64
