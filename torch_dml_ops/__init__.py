"""torch_dml_ops: DirectML's GatherND, ScatterND and TopK1 as PyTorch operators.

Importing the package registers the ops in the ``torch_dml_ops`` namespace
(``torch.ops.torch_dml_ops.*``) and exposes their public functions.
"""
from ._validation import (ConstraintError, ConstraintIndexError, ConstraintTypeError, FEATURE_LEVELS,
                          MemoryOverlapError, feature_level, get_feature_level)
from ._backend import available_backends
from .gather_nd import gather_nd
from .scatter_nd import scatter_nd, scatter_nd_
from .top_k1 import AxisDirection, TopK1Result, top_k1, topk

__version__ = "0.1.0"

__all__ = [
    "gather_nd",
    "scatter_nd",
    "scatter_nd_",
    "top_k1",
    "topk",
    "AxisDirection",
    "TopK1Result",
    "feature_level",
    "get_feature_level",
    "FEATURE_LEVELS",
    "ConstraintError",
    "ConstraintTypeError",
    "ConstraintIndexError",
    "MemoryOverlapError",
    "available_backends",
]
