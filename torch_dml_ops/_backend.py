"""Which kernel runs a call: the dispatcher decides, by device.

Default registrations (``auto``):

========================  =====================================================================
dispatch key              kernel
========================  =====================================================================
CPU                       the C++ kernels (``csrc/``, registered by the extension itself)
CUDA                      the Triton kernels (``triton_kernels/``, registered here when triton
                          is installed; imported on the first CUDA call)
CompositeExplicitAutograd the portable torch path (``portable/``): every other device, and the
                          CPU when the C++ extension is not built
========================  =====================================================================

Every backend offers the same protocol: a ``KERNELS`` mapping from op name to a kernel with the
op's schema (``portable.KERNELS``, ``triton_kernels.KERNELS``; the C++ kernels are registered by
name in C++).  A kernel covers every call it is given: it validates, computes, bumps the version
counter of what it writes, and, where its device code lacks a case, says so in its docstring and
hands the call to the portable kernel itself.

``TORCH_DML_OPS_BACKEND`` selects the backend for the whole process; it is read once, at import,
and its kernels are registered then, before any call.  Names:

  ``auto``    the defaults above;
  ``torch``   the portable path on every device;
  ``triton``  the Triton kernels on CUDA and on the CPU (the CPU needs ``TRITON_INTERPRET=1`` set
              before triton is imported: triton's interpreter);
  ``native``  the C++ kernels on the CPU (an error when they are not built), CUDA as ``auto``.

There is no public runtime switch.  Switching means re-registering dispatcher kernels, and the
dispatcher's tables are not safe to change while other threads dispatch through them (a thread
calling an op during a switch could fail with an internal assert or run another op's kernel).
``override(name)`` below does exactly that switch and is private: for the single-threaded test
suite, the benchmark and ``python -m torch_dml_ops``.  Code that wants one backend's kernel for
one call calls it directly: ``torch_dml_ops.portable.KERNELS[op]``,
``torch_dml_ops.triton_kernels.KERNELS[op]``.  No op call reads the environment.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import warnings
from typing import List, Tuple

import torch
from . import portable as _portable
from ._compat import (CPU_KEYSET, CUDA_KEYSET, drop_library, eager_and_unobserved,
                      nothing_intercepts)
from ._library import EXTENSION_ERROR, NAMESPACE, OPS, extension_loaded, lib

BACKENDS = ("auto", "torch", "triton", "native")


@functools.lru_cache(maxsize=None)
def triton_import_error() -> str:
    """Empty string when the Triton kernels import, else why not."""
    try:
        from . import triton_kernels  # noqa: F401
    except Exception as e:  # ImportError, or a triton build that cannot initialise here
        return f"{type(e).__name__}: {e}"
    return ""


def triton_available() -> bool:
    return triton_import_error() == ""


def interpreting() -> bool:
    """Whether triton runs its kernels in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def portable_kernels() -> dict:
    return _portable.KERNELS


def triton_kernels() -> dict:
    from .triton_kernels import KERNELS
    return KERNELS


@functools.lru_cache(maxsize=None)
def _cpp_kernels() -> dict:
    """The C++ CPU kernels as the extension registered them (captured before any override)."""
    return {name: torch.library.get_kernel(f"{NAMESPACE}::{name}", "CPU") for name in OPS}


def _cpp(name: str):
    kernel = _cpp_kernels()[name]

    def run(keyset, *args, **kwargs):
        return kernel.call_boxed(keyset, *args, **kwargs)
    return run


def _lazy_triton(name: str):
    """The CUDA kernel of ``auto``: the Triton kernel, imported on the first call (triton's
    import costs seconds); the portable kernel, with one warning, where triton cannot start."""
    def run(*args, **kwargs):
        if triton_available():
            return triton_kernels()[name](*args, **kwargs)
        _warn_no_triton()
        return portable_kernels()[name](*args, **kwargs)
    return run


@functools.lru_cache(maxsize=None)
def _warn_no_triton() -> None:
    warnings.warn(f"torch_dml_ops: the Triton kernels cannot be imported "
                  f"({triton_import_error()}); CUDA calls run the portable path", RuntimeWarning)


def _table(name: str) -> dict:
    """{dispatch key: {op: (kernel, with_keyset)}} for backend ``name``."""
    portable = {op: (fn, False) for op, fn in portable_kernels().items()}
    if name == "torch":
        return {"CPU": portable, "CUDA": portable}
    if name == "triton":
        if not triton_available():
            raise RuntimeError(f"backend 'triton': the Triton kernels cannot be imported "
                               f"({triton_import_error()})")
        tk = {op: (fn, False) for op, fn in triton_kernels().items()}
        table = {"CUDA": tk}
        if interpreting():
            table["CPU"] = tk
        elif not torch.cuda.is_available():
            raise RuntimeError(
                "backend 'triton' on CPU tensors needs TRITON_INTERPRET=1 (set before triton is "
                "imported) to run the kernels in triton's interpreter")
        return table
    if name == "native" and not extension_loaded():
        raise RuntimeError(f"backend 'native': {EXTENSION_ERROR}")
    cpu = {op: (_cpp(op), True) for op in OPS} if extension_loaded() else portable
    return {"CPU": cpu, "CUDA": {op: (_lazy_triton(op), False) for op in OPS}
            if importlib.util.find_spec("triton") else portable}


_overrides: list = []      # the Library objects of the open backend blocks, innermost last


class override:
    """``with override("torch"): ...`` runs every op call in the block on that backend (``auto``,
    ``torch``, ``triton``, ``native``; see the module docstring).  Blocks nest.

    Private and NOT thread-safe: it re-registers the ops' CPU and CUDA kernels for the whole
    process, so no other thread may call an op while a block is entered or left.  For the test
    suite, the benchmark and the demo, which are single-threaded."""

    def __init__(self, name: str) -> None:
        canon = str(name).strip().lower() or "auto"
        if canon not in BACKENDS:
            raise ValueError(f"backend {name!r} is not one of {', '.join(BACKENDS)}")
        self.name = canon

    def __enter__(self) -> str:
        table = _table(self.name)
        override = torch.library.Library(NAMESPACE, "IMPL")
        with warnings.catch_warnings():
            # "Overriding a previously registered kernel": what this block is for (stated
            # explicitly: allow_override defaults to False before torch 2.13).
            warnings.simplefilter("ignore", UserWarning)
            for key, kernels in table.items():
                for op, (fn, with_keyset) in kernels.items():
                    override.impl(op, fn, key, with_keyset=with_keyset, allow_override=True)
        _overrides.append((self.name, override))
        return self.name

    def __exit__(self, *exc) -> None:
        _, override = _overrides.pop()
        drop_library(override)


def current_backend() -> str:
    """The backend in force (the innermost open block, else ``auto``)."""
    return _overrides[-1][0] if _overrides else "auto"


def register_defaults() -> None:
    """The ``auto`` kernels (the C++ CPU kernels register themselves).

    Every kernel resolves negative-bit views itself (and a conjugate bit cannot occur: complex
    dtypes are refused), so the dispatcher's Negative and Conjugate keys fall through: torch's
    generic fallback for them cannot handle an op that returns nothing (``out=``, in place)."""
    for op, fn in portable_kernels().items():
        lib.impl(op, fn, "CompositeExplicitAutograd")
        for key in ("Negative", "Conjugate"):
            lib.impl(op, torch.library.fallthrough_kernel, key)
    for op, (fn, with_keyset) in _table("auto")["CUDA"].items():
        lib.impl(op, fn, "CUDA", with_keyset=with_keyset)
    if extension_loaded():
        _cpp_kernels()      # capture them now, before any override


def apply_environment() -> None:
    """``TORCH_DML_OPS_BACKEND``, read once, at import."""
    name = os.environ.get("TORCH_DML_OPS_BACKEND", "auto").strip().lower() or "auto"
    if name not in BACKENDS:
        raise ValueError(f"TORCH_DML_OPS_BACKEND={name!r} is not one of {', '.join(BACKENDS)}")
    if name != "auto":
        override(name).__enter__()     # for the life of the process, before any call


def available_backends() -> List[Tuple[str, str, str]]:
    """(name, device, why) for every backend that can run here, for the demo and the benchmarks."""
    rows = [("torch", "cpu", "portable path")]
    if extension_loaded():
        rows.append(("native", "cpu", "C++ kernels (stable ABI)"))
    if torch.cuda.is_available():
        rows.append(("torch", "cuda", "portable path"))
        if triton_available():
            rows.append(("triton", "cuda", "compiled Triton kernel"))
    if triton_available() and interpreting():
        rows.append(("triton", "cpu", "Triton interpreter (TRITON_INTERPRET=1)"))
    return rows


# ---------------------------------------------------------------------------------------------
# The public functions' path to the kernel
# ---------------------------------------------------------------------------------------------



def backend_key(tensors):
    """The dispatch key set of the backend kernel for plain CPU or CUDA ``tensors`` with no
    dispatch mode active (the kernel the dispatcher picks below the Autograd key: every key in
    between falls through for these ops), else None.  Not inside a torch.func transform,
    whose wrappers look like plain tensors, nor under a dispatch mode or the profiler."""
    if not nothing_intercepts():
        return None
    for t in tensors:
        if type(t) is not torch.Tensor:
            return None     # a subclass, FakeTensor, FunctionalTensor: the full dispatch
    t = tensors[0]
    return CPU_KEYSET if t.is_cpu else CUDA_KEYSET if t.is_cuda else None


def eager_keyset(tensors):
    """:func:`backend_key` for a call from a public function, when nothing can observe the call
    below it, so that it may go straight to the backend kernel (``Differentiable.call``),
    skipping the Python Autograd kernel (M4 in docs/benchmarks.md); else None (the
    dispatcher).  Only in eager mode (not torch.compile / export / jit tracing), with no
    torch-function mode, functorch transform or forward-AD level; the caller has established
    that no derivative is needed.
    """
    if not eager_and_unobserved():
        return None
    return backend_key(tensors)


def vmap_operands(info, in_dims, tensors):
    """Physical operands for a vmap rule: every tensor with its batch dim moved to the front,
    unbatched ones expanded (a view) to the batch size."""
    out = []
    for t, d in zip(tensors, in_dims):
        if d is None:
            out.append(t.unsqueeze(0).expand((info.batch_size,) + tuple(t.shape)))
        else:
            out.append(t.movedim(d, 0))
    return out


def logical(t: torch.Tensor, bdim) -> torch.Tensor:
    """A meta tensor with the per-sample shape and dtype: the validation layer checks what the
    user wrote, not the batched physical tensor."""
    shape = tuple(t.shape) if bdim is None else tuple(s for i, s in enumerate(t.shape) if i != bdim)
    return torch.empty(shape, dtype=t.dtype, device="meta")
