"""torch_dml_ops: DirectML's GatherND, ScatterND and TopK1 as PyTorch operators.

Importing the package loads the C++ extension (which defines the ops in the ``torch_dml_ops``
namespace, ``torch.ops.torch_dml_ops.*``, and registers their CPU kernels), registers the
portable and Triton kernels, fake kernels, autograd and vmap rules, and exposes the public
functions.
"""
import os as _os
import sys as _sys
import typing as _typing

if not _os.path.isdir(_os.path.join(__path__[0], "triton_kernels")):
    # A source checkout imported in place (its root on sys.path, as `python -m` run there puts
    # it ahead of any install): the kernels' folder sits beside the package, not in it (setup.py
    # maps it under the package at install), so the package also looks for it there.
    _root = _os.path.dirname(_os.path.abspath(__path__[0]))
    if _os.path.isfile(_os.path.join(_root, "triton_kernels", "__init__.py")):
        __path__.append(_root)

from . import _compat   # first: the torch version policy (an older torch fails here, saying so)
from . import _errors
from ._errors import ConstraintError, ConstraintIndexError, ConstraintTypeError, MemoryOverlapError
from ._compat import UntestedTorchWarning
from ._levels import FEATURE_LEVELS, feature_level, get_feature_level
from . import _backend, _inductor_fixes
from ._backend import available_backends, current_backend
from .gather_nd import gather_nd
from .scatter_nd import scatter_nd, scatter_nd_
from .top_k1 import AxisDirection, TopK1Result, top_k1, topk

_backend.register_defaults()
_errors.quiet_fake_tensor_refusals()
_inductor_fixes.lower_storage_offset()     # Inductor already loaded: fix it now
_backend.apply_environment()
if "torch.distributed.tensor" in _sys.modules:    # DTensor in use: register the sharding rules
    from . import distributed  # noqa: F401,E402

__version__ = "0.2.0"


if not _typing.TYPE_CHECKING:     # (type checkers would take every unknown name for valid)
    def __getattr__(name: str):
        if name == "backend":      # removed in 0.2; scripts written for 0.1 still call it
            raise AttributeError(
                "torch_dml_ops.backend(...) was removed in 0.2: switching kernels while other "
                "threads dispatch is unsafe. Choose a backend for the process with "
                "TORCH_DML_OPS_BACKEND=<auto|torch|triton|native> (read at import), or call one "
                "backend's kernel directly (torch_dml_ops.portable.KERNELS, "
                "torch_dml_ops.triton_kernels.KERNELS); see docs/backends.md")
        raise AttributeError(f"module 'torch_dml_ops' has no attribute {name!r}")

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
    "UntestedTorchWarning",
    "current_backend",
    "available_backends",
]
