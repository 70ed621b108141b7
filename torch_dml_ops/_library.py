"""The ``torch_dml_ops`` namespace: the op schemas, the C++ extension that defines them, and the
one torch.library fragment Python registers its kernels in.

The schemas are defined in C++ (``csrc/registration.cpp``, ``STABLE_TORCH_LIBRARY``) when the
extension ``torch_dml_ops/_C.abi3.so`` is built: loading it defines the ops and registers their
CPU kernels, in a Python process (here) as in a C++ program that links it (an AOTInductor
deployment).  ``SCHEMAS`` below is the same list; at load each C++ schema is compared with it (a
stale build is refused), and without the extension (no C++ compiler at install) Python defines
the ops from it and every device runs the portable path.
"""
from __future__ import annotations

import glob
import os
import warnings

import torch

from . import _tables

NAMESPACE = "torch_dml_ops"

_GATHER = ("Tensor input, Tensor indices, int batch_dims=0, int? input_dimension_count=None, "
           "int? indices_dimension_count=None, str feature_level='permissive', "
           "bool check_indices=True")
_SCATTER = ("Tensor indices, Tensor updates, str reduction='none', "
            "int? input_dimension_count=None, int? indices_dimension_count=None, "
            "str feature_level='permissive', bool check_indices=True, bool deterministic=False")

#: Every op of the namespace (the C++ side defines the same; checked at load).
SCHEMAS = {
    # gather_nd: functional; out= (no autograd, like torch's out= ops); its backward, a
    # scatter-add of the output gradient into zeros of the input's shape.
    "gather_nd": f"gather_nd({_GATHER}) -> Tensor",
    "gather_nd_out": f"gather_nd_out({_GATHER}, *, Tensor(a!) out) -> ()",
    # index_sizes: the k indexed input dims' sizes; the batch and trailing ones are grad's.
    "gather_nd_backward": ("gather_nd_backward(Tensor grad, Tensor indices, "
                           "SymInt[] index_sizes, int batch_dims, int? input_dimension_count, "
                           "int? indices_dimension_count) -> Tensor"),
    # scatter_nd: functional, out=, in place (skips the copy: KV-cache updates).
    "scatter_nd": f"scatter_nd(Tensor input, {_SCATTER}) -> Tensor",
    "scatter_nd_out": f"scatter_nd_out(Tensor input, {_SCATTER}, *, Tensor(a!) out) -> ()",
    "scatter_nd_": f"scatter_nd_(Tensor(a!) input, {_SCATTER}) -> ()",
    # top_k1: index_dtype None means int64 (a ScalarType default does not survive AOTInductor's
    # serialization).
    "top_k1": ("top_k1(Tensor input, int k, int axis=-1, str direction='decreasing', "
               "ScalarType? index_dtype=None, str feature_level='permissive') -> "
               "(Tensor values, Tensor indices)"),
}
#: The ops with a CPU kernel in C++, and so the ones the backends override.
OPS = tuple(SCHEMAS)

# FRAGMENT: the namespace is extended by more than one module (one per op) and by C++.
lib = torch.library.Library(NAMESPACE, "FRAGMENT")


def extension_path() -> str:
    """Where the built extension is, or ""."""
    here = os.path.dirname(os.path.abspath(__file__))
    found = sorted(glob.glob(os.path.join(here, "_C*.so")) + glob.glob(os.path.join(here, "_C*.pyd")))
    return found[0] if found else ""


def _load_extension() -> str:
    """Load the C++ extension: "" when loaded, else why not."""
    path = extension_path()
    if not path:
        # setup.py leaves the reason of a failed build beside the package.
        record = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_C.build-error.txt")
        try:
            with open(record, encoding="utf-8") as f:
                why = f.read().strip()
        except OSError:
            why = ("no C++ compiler, or torch not visible to the build, at install; to build "
                   "it, install a C++17 compiler, then reinstall this package")
        return f"the C++ extension is not built ({why})"
    try:
        torch.ops.load_library(path)
    except OSError as e:
        return f"the C++ extension {path} cannot be loaded ({e})"
    _tables.check_cpp_tables(torch.ops.torch_dml_ops._tables())
    ns = getattr(torch.ops, NAMESPACE)
    for name, schema in SCHEMAS.items():
        have = str(getattr(ns, name).default._schema).replace('"', "'")
        if have != f"{NAMESPACE}::{schema}":
            raise ImportError(f"torch_dml_ops: the C++ extension defines {have}, this package "
                              f"expects {NAMESPACE}::{schema}; rebuild it")
    return ""


#: Empty when the C++ extension (schemas and CPU kernels) is loaded, else why not.
EXTENSION_ERROR = _load_extension()
if EXTENSION_ERROR:
    warnings.warn(f"torch_dml_ops: {EXTENSION_ERROR}.  CPU calls run the portable torch path.",
                  RuntimeWarning, stacklevel=2)
    for _schema in SCHEMAS.values():
        lib.define(_schema)


def extension_loaded() -> bool:
    return not EXTENSION_ERROR


def op(name: str):
    """The default overload of ``torch.ops.torch_dml_ops.<name>``."""
    return getattr(getattr(torch.ops, NAMESPACE), name).default


def document(opname: str, doc: str) -> None:
    """Give ``torch.ops.torch_dml_ops.<opname>`` and its overloads a docstring (the dispatcher's
    objects have none): ``doc``, then the schema of each overload."""
    packet = getattr(getattr(torch.ops, NAMESPACE), opname)
    schemas = []
    for name in packet.overloads():
        overload = getattr(packet, name)
        schema = str(overload._schema)
        overload.__doc__ = f"{doc}\n\nSchema:\n    {schema}\n"
        schemas.append(schema)
    packet.__doc__ = doc + "\n\nSchemas:\n" + "".join(f"    {s}\n" for s in schemas)

