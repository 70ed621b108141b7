"""The ``torch_dml_ops`` namespace: the op schemas, the C++ extension that defines them, and the
one torch.library fragment Python registers its kernels in.

The schemas are written once, in ``_schemas.SCHEMAS``.  When the extension
``torch_dml_ops/_C.abi3.so`` is built (``setup.py`` generates its list of schemas from that
file), loading it defines the ops and registers their CPU kernels, in a Python process (here) as
in a C++ program that links it (an AOTInductor deployment); at load each schema it defined is
compared with ``SCHEMAS`` (a stale build is refused).  Without the extension (no C++ compiler at
install) Python defines the ops from ``SCHEMAS`` and every device runs the portable path.
"""
from __future__ import annotations

import glob
import os
import warnings

import torch

from ._schemas import EXTENSION_SCHEMAS, SCHEMAS

NAMESPACE = "torch_dml_ops"

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
    ns = getattr(torch.ops, NAMESPACE)
    for name, schema in {**SCHEMAS, **EXTENSION_SCHEMAS}.items():
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

