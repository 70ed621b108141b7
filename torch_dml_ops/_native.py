"""The native CPU kernels (``torch_dml_ops/csrc/*.c``, built into ``torch_dml_ops._cpu_kernels``).

Plain C11 + pthreads, compiled by ``pip install`` when a C compiler is present (the extension is
optional: without one the CPU runs the portable torch path).  The functions are called through
ctypes, which releases the GIL for the call; they receive raw data pointers of CPU tensors that
the Python wrappers (``_native_gather_scatter.py``, ``_native_topk.py``) have validated and laid
out, plus the thread count (``threads()``: ``torch.get_num_threads()``, so
``torch.set_num_threads`` applies, bounded by the CPUs this process may run on).

The ops' kernels check, for every backend, that each tensor lies inside its storage
(``_validation.check_storage``) before a pointer reaches C.
"""
from __future__ import annotations

import ctypes
import functools
import os

import torch

#: The C ABI version these wrappers were written against (``tdo_abi_version`` in module.c).
ABI_VERSION = 2

c_ptr = ctypes.c_void_p
c_i64 = ctypes.c_int64
c_int = ctypes.c_int
c_i64_p = ctypes.POINTER(ctypes.c_int64)

#: Index dtypes as the C side numbers them (``TDO_I32`` ... in common.h).
INDEX_CODES = {torch.int32: 0, torch.int64: 1, torch.uint32: 2, torch.uint64: 3}


@functools.lru_cache(maxsize=None)
def _load():
    """(library, "") when the extension loads, else (None, why not)."""
    try:
        from . import _cpu_kernels as mod  # the CPython module that carries the kernels
    except ImportError as e:
        return None, (f"the native extension is not built ({e}); reinstall with a C compiler "
                      f"present (pip install -e .)")
    try:
        lib = ctypes.CDLL(mod.__file__)
        lib.tdo_abi_version.restype = c_int
        version = lib.tdo_abi_version()
    except (OSError, AttributeError) as e:
        return None, f"the native extension {mod.__file__} cannot be loaded ({e})"
    if version != ABI_VERSION:
        return None, (f"the native extension has ABI version {version}, these wrappers expect "
                      f"{ABI_VERSION}; rebuild it (pip install -e .)")
    lib.tdo_hugepage_hint.argtypes = [c_ptr, c_i64]
    lib.tdo_hugepage_hint.restype = None
    return lib, ""


def lib():
    """The loaded ctypes library, or None."""
    return _load()[0]


def import_error() -> str:
    """Empty when the native kernels load, else why not."""
    return _load()[1]


def available() -> bool:
    return _load()[0] is not None


def _hardware_threads() -> int:
    """The CPUs this process may run on (its affinity mask; os.cpu_count() where there is none)."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, n)


#: The CPUs this process may run on, read once at import.
HARDWARE_THREADS = _hardware_threads()
#: The most threads a kernel uses: threads beyond the CPUs only add thread starts and
#: per-thread scratch.  At most the kernels' own bound, ``TDO_MAX_THREADS`` (64, common.h),
#: which the C side enforces whatever it is passed; tests raise this to run many-thread paths.
MAX_THREADS = min(64, HARDWARE_THREADS)


def threads() -> int:
    """Threads a kernel may use: torch's setting (``torch.set_num_threads``; always >= 1), at
    most MAX_THREADS: ``torch.set_num_threads(1000)`` must not mean 1000 threads' worth of
    scratch."""
    n = torch.get_num_threads()
    return n if n < MAX_THREADS else MAX_THREADS


#: Fresh outputs at least this large get the transparent-hugepage hint before their first write.
HUGEPAGE_MIN_BYTES = 8 << 20


def empty(shape, dtype: torch.dtype, nbytes: int = -1) -> torch.Tensor:
    """A new contiguous CPU tensor for a kernel's output.  Large ones are hinted to be backed by
    transparent huge pages before anything touches them: first-touch page faults otherwise cost
    more than the gather or scatter that fills them (3.6 GB/s with 4 KiB pages, ~2x that with
    2 MiB pages, measured here).  ``nbytes``: its size in bytes, where the caller knows it
    (saves two calls on small outputs)."""
    t = torch.empty(shape, dtype=dtype)
    if nbytes < 0:
        _hint(t)
    elif nbytes >= HUGEPAGE_MIN_BYTES:
        lib().tdo_hugepage_hint(t.data_ptr(), nbytes)
    return t


def empty_like(t: torch.Tensor) -> torch.Tensor:
    """``empty`` with ``t``'s shape and dtype (``empty_like`` parses no shape: the cheapest
    allocation for small calls)."""
    out = torch.empty_like(t, memory_format=torch.contiguous_format)
    _hint(out)
    return out


def _hint(t: torch.Tensor) -> None:
    nbytes = t.numel() * t.element_size()
    if nbytes >= HUGEPAGE_MIN_BYTES:
        lib().tdo_hugepage_hint(t.data_ptr(), nbytes)
