"""The library's dtype tables and constants, written once.

Plain data, no imports, like ``_schemas``: ``setup.py`` reads this file (without importing the
package or torch) and generates the C++ copy the kernels' checks use (``tdo_data.inc`` in the
build folder); ``_tables`` builds the torch-facing tables from it.
"""

#: The torch releases this version supports: from TORCH_FLOOR, whose stable ABI the C++ kernels
#: are built for (setup.py's TORCH_TARGET_VERSION), with no upper bound: the one binary loads on
#: every later torch.  TORCH_TESTED lists the releases CI runs (.ci/run: every one of them, the
#: floor, the README's pin and the newest with the whole suite); a torch newer than the last one
#: works where torch kept what the Python layer uses, and the import says once that it is untested
#: (docs/packaging.md, "Torch versions").
TORCH_FLOOR = "2.10"
TORCH_TESTED = ("2.10", "2.11", "2.12", "2.13", "2.14", "2.15")
#: The oldest Python the floor's torch has wheels for (torch 2.10: CPython 3.10 to 3.14): the
#: package's python_requires and the abi3 extension's limited API.
TORCH_FLOOR_PYTHON = "3.10"

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
#: top_k1's index dtypes: spec DML_TOP_K1.md OutputIndexTensor is UINT32; int64 and int32 are
#: torch-friendly extras.
TOPK_INDEX_DTYPES = ("int64", "int32", "uint32")
#: "No bad index found": what the kernels' first-bad-position searches return otherwise.
NO_ERROR = 2**63 - 1
#: The most parallel parts a C++ kernel splits a call into (per-part scratch is sized by it).
MAX_THREADS = 64
#: The most steps the exact memory-overlap test takes before it answers "too hard to tell".
OVERLAP_WORK = 1 << 14

#: DirectML feature levels whose tables are enforced, oldest first; "permissive" (no level's
#: limits) is the default.
FEATURE_LEVELS = ("2_1", "3_0", "3_1")
#: The permissive level as the messages name it (the only level the C++ kernels know: the
#: levels' limits are checked in Python, _checks).
PERMISSIVE_NAME = ("permissive default (no DirectML feature level chosen: every type and rank "
                   "this library takes; torch_dml_ops.feature_level('2_1'), '3_0' or '3_1' "
                   "enforces that level's tables)")
#: The level from which each op's DimensionCount is FULL_RANK (min, max); before it, OLD_RANK
#: (spec DML_GATHER_ND.md, DML_SCATTER_ND.md, DML_TOP_K1.md "Tensor support").
FULL_RANK_FROM = {"gather_nd": "3_0", "scatter_nd": "3_0", "top_k1": "3_1"}
FULL_RANK = (1, 8)
OLD_RANK = (4, 4)
#: The level of DML_GATHER_ND1, the gather with BatchDimensionCount (spec DML_GATHER_ND.md
#: Remarks); before it batch_dims must be 0.
BATCH_DIMS_FROM = "3_0"
#: ScatterND reductions: DML_SCATTER_ND's overwrite ("none") and ONNX ScatterND-18's four.
REDUCTIONS = ("none", "add", "mul", "max", "min")
#: DML_TOP_K1's AxisDirection.
DIRECTIONS = ("decreasing", "increasing")

#: The message of every rule the Python checks and the C++ kernels share, written once:
#: ``str.format`` fields, filled with strings (``{op}`` the op's name, ``{level}`` the level's
#: full name, values as Python prints them).  spec <page> cites a DirectML page in shared/spec.
MESSAGES = {
    # spec "Tensor support" tables.
    "data_dtype": ("{op}: {name} has dtype {dtype} ({dml_type}), which is not a supported data "
                   "type at the {level}; supported: {supported}"),
    "index_dtype": ("{op}: {name} has dtype {dtype} ({dml_type}), which is not a supported index "
                    "type at the {level}; supported: {supported}{hint}"),
    "index_dtype_hint": (" (signed and 64-bit indices, and so negative indices, arrive at "
                         "DML_FEATURE_LEVEL_3_0)"),
    # spec DML_GATHER_ND.md "Tensor constraints": the tensors have the same DimensionCount.
    "dml_rank_equal": ("{op}: in the DML form {name}.DimensionCount must equal "
                       "{first}.DimensionCount ({rank}), got {got}"),
    "dml_rank_range": ("{op}: {name}.DimensionCount must be {want} at {level}, got {got} (in the "
                       "DML form every tensor has exactly the level's DimensionCount)"),
    "natural_rank": ("{op}: {name} has {rank} dimensions; at {level} the DimensionCount is "
                     "{want}, so a natural-form tensor may have at most {most} dimensions (it is "
                     "padded with leading 1s)"),
    "level_argument": ("feature_level argument {level} is not a canonical feature level: "
                       "expected one of {levels} or 'permissive'"),
    # spec DML_GATHER_ND.md Remarks: BatchDimensionCount belongs to DML_GATHER_ND1.
    "batch_dims_level": ("{op}: batch_dims={batch_dims} needs DML_OPERATOR_GATHER_ND1 "
                         "(BatchDimensionCount), introduced in {since}; the active level is "
                         "{level}"),
    "reduction_choice": "{op}: reduction must be one of {choices}, got {reduction}",
    "reduction_level": ("{op}: reduction={reduction} is an ONNX ScatterND-18 extension; "
                        "DML_OPERATOR_SCATTER_ND only overwrites, so at {level} the reduction "
                        "must be 'none'"),
    # spec DML_SCATTER_ND.md "Tensor constraints": Input, Output and Updates share one DataType.
    "updates_dtype": ("{op}: UpdatesTensor has dtype {dtype} but InputTensor has {input_dtype}; "
                      "they must have the same DataType"),
    # spec DML_SCATTER_ND.md UpdatesTensor (spec README 1: the segment after the indexed
    # dimensions, right-aligned).
    "updates_shape": ("{op}: UpdatesTensor must have sizes {want} (IndicesTensor's leading "
                      "{leading} + InputTensor's trailing {trailing}), got {got}"),
    "direction_choice": "{op}: direction (AxisDirection) must be {choices}, got {direction}",
    "topk_index_dtype": ("{op}: index_dtype (OutputIndexTensor) must be one of {supported}, got "
                         "{index_dtype}"),
    # spec DML_TOP_K1.md Axis: "must be less than the DimensionCount of the InputTensor"
    # (negative axes count from the end, as in torch).
    "topk_axis": ("{op}: Axis {axis} is out of range for InputTensor with {rank} dimensions "
                  "(expected in [{lo}, {hi}])"),
    # spec DML_TOP_K1.md K: greater than 0; spec README 4: K equal to the size is allowed.
    "topk_k": "{op}: K must be in [1, {n}] (InputTensor size along Axis {axis}), got {k}",
    "topk_empty_axis": ("{op}: InputTensor has size 0 along Axis {axis} (sizes {shape}): there is "
                        "nothing to select, and K must be at least 1 (got {k}); torch_dml_ops."
                        "topk, like torch.topk, returns empty results for k=0"),
    "topk_index_limit": ("{op}: InputTensor has size {n} along Axis {axis}, but "
                         "OutputIndexTensor's type {index_dtype} holds indices up to {top}; use "
                         "index_dtype=torch.int64 for an axis longer than {limit}"),
    "topk_index_level": ("{op}: OutputIndexTensor is UINT32 in DirectML, but index_dtype is "
                         "{index_dtype} at {level}; pass index_dtype=torch.uint32"),

    # The layout of a gather_nd / scatter_nd call (spec README, "The two ways to call an
    # operator"; ONNX GatherND / ScatterND).
    "dml_both_counts": ("{op}: the DML form needs both input_dimension_count and "
                        "indices_dimension_count (got {input_count} and {indices_count}); pass "
                        "neither for the natural form"),
    # spec DML_GATHER_ND.md IndicesTensor: its DimensionCount matches InputTensor's.
    "dml_indices_rank": ("{op}: in the DML form IndicesTensor.DimensionCount must equal "
                         "InputTensor.DimensionCount ({rank}), got {got} (sizes {shape})"),
    # spec DML_GATHER_ND.md / spec README 2: the count ranges over [1, DimensionCount].
    "count_range": "{op}: {count_name} must be in [1, {name}.DimensionCount = {n}], got {count}",
    "padding_size": ("{op}: {name} has size {size} in dimension {dim}, which {count_name}={count} "
                     "marks as a leading padding dimension; padding dimensions must have size 1 "
                     "(sizes {shape})"),
    "input_rank": "{op}: InputTensor must have at least 1 dimension, got shape {shape}",
    "indices_rank": ("{op}: IndicesTensor must have at least 1 dimension (its last one is the "
                     "index-tuple size), got shape {shape}"),
    # ONNX GatherND: 0 <= batch_dims < min(q, r).
    "batch_dims_range": ("{op}: batch_dims (BatchDimensionCount) must be in [0, min(IndicesTensor "
                         "rank {q}, InputTensor rank {r})), got {batch_dims}"),
    "batch_dims_range_backward": ("{op}: batch_dims (BatchDimensionCount) must be in [0, "
                                  "IndicesTensor rank {q}), got {batch_dims}"),
    # spec DML_GATHER_ND.md / DML_SCATTER_ND.md: the tuple size cannot exceed the
    # DimensionCount; ONNX GatherND: k >= 1; ONNX ScatterND: k >= 0.
    "tuple_size": ("{op}: IndicesTensor's last dimension is the index-tuple size and must be in "
                   "[{lo}, {hi}] (InputTensor rank {r} minus batch_dims {batch_dims}), got {k} "
                   "(IndicesTensor sizes {shape})"),
    "batch_dim_differs": ("{op}: batch dimension {d} differs: IndicesTensor has {indices_size}, "
                          "InputTensor has {input_size} (the first batch_dims={batch_dims} "
                          "dimensions must match)"),
    "result_rank": ("{op}: {name} needs {rank} dimensions {shape}, more than the DimensionCount "
                    "{n} of the DML-form inputs"),
    # gather_nd_backward's arguments.
    "index_sizes": ("{op}: index_sizes must hold the k = {k} indexed input sizes (IndicesTensor's "
                    "last dimension), each >= 0, got {sizes}"),
    "grad_not_output": ("{op}: grad has shape {shape}, which is not a gather_nd output for "
                        "IndicesTensor shape {indices_shape} (its leading dimensions must be "
                        "IndicesTensor's {leading})"),
    "grad_too_big": ("{op}: index_sizes {sizes} with grad's shape {shape} describe an input "
                     "gradient of shape {input_shape}, more than 2**63 - 1 elements"),
    "grad_alloc": ("{op}: cannot allocate the input gradient of shape {shape} and dtype {dtype} "
                   "(index_sizes and grad's batch and trailing dimensions)"),
    "grad_shape": ("{op}: grad has shape {shape}, expected {want} (the gather_nd output of "
                   "InputTensor shape {input_shape} and IndicesTensor shape {indices_shape})"),
    # Index values (found by the kernels).
    "index_range": ("{op}: IndicesTensor value {value} at position {position} is out of range for "
                    "{dim} of size {size}; valid range {valid}{unsigned}"),
    "index_range_empty": "none: the dimension is empty",
    "index_unsigned": " (index type {dtype} is unsigned: no negative indices)",
    # Tensors, memory and written-to tensors (torch's own rules, in torch's words where it has
    # them).
    "same_device": ("{op}: {name} is on {device} but {first} is on {first_device}; all tensors "
                    "must be on the same device"),
    "dense": ("{op}: {name} is a sparse or otherwise non-strided tensor; only dense (strided) "
              "tensors are supported"),
    "storage": ("{op}: {name}'s storage has {have} bytes but the tensor needs {need} bytes (shape "
                "{shape}, stride {stride}, storage offset {offset}, {itemsize}-byte elements; was "
                "its storage resized?)"),
    "out_dtype": "{op}: {name} has dtype {dtype}, expected {want} (the InputTensor's)",
    "out_shape": "{op}: {name} has shape {shape}, expected {want}",
    "out_device": "{op}: {name} is on {device}, expected {want}",
    "inference": ("{op}: {name} is an inference tensor; Inplace update to inference tensor "
                  "outside InferenceMode is not allowed"),
    "internal_overlap": ("{op}: {name} has internal overlap (sizes {sizes}, strides {strides}): "
                         "unsupported operation: more than one element of the written-to tensor "
                         "refers to a single memory location. Please clone() the tensor before "
                         "performing the operation."),
    "overlap": ("{op}: {name} overlaps {input} in memory; pass a separate buffer (unsupported "
                "operation: some elements of the input tensor and the written-to tensor refer to "
                "a single memory location)"),
    "overlap_too_hard": ("{op}: {name} may overlap {input} in memory: their strides interleave too "
                         "intricately to rule out a shared element in {work} steps ({name}: "
                         "{layout}; {input}: {input_layout}); pass a separate buffer, or clone() "
                         "one of them"),
    "layout": "sizes {sizes}, strides {strides}, storage offset {offset}, {itemsize}-byte elements",
}
#: The messages of a feature level's limits: policy, not memory safety, so checked by the Python
#: layer alone (the C++ kernels ignore feature_level; setup.py leaves these out of their copy).
LEVEL_MESSAGES = ("index_dtype_hint", "dml_rank_range", "natural_rank", "level_argument",
                  "batch_dims_level", "reduction_level", "topk_index_level")
