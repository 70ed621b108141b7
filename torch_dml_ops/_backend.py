"""Which implementation runs a call: the portable torch path or the Triton kernel.

``TORCH_DML_OPS_BACKEND`` (read at every call, by the real kernel, never by traced code):
  ``auto`` (default)  Triton for CUDA tensors when triton imports; the native C kernels for CPU
                      tensors when they are built; the portable path otherwise (and for the few
                      calls a native kernel does not cover: it says which);
  ``torch``           always the portable path;
  ``triton``          always the Triton kernel; CPU tensors need ``TRITON_INTERPRET=1``;
  ``native``          the native C kernels for every CPU call they cover (an error when they are
                      not built); the portable path for CUDA tensors and uncovered calls.
"""
from __future__ import annotations

import functools
import os

import torch
import torch.autograd.forward_ad as _fwad

from . import _native

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


# os.environ.get of an unset variable costs ~2 us (it raises and catches a KeyError inside), more
# than the rest of a small call's dispatch; the mapping behind os.environ answers in ~0.1 us and
# sees every change made through os.environ (monkeypatch.setenv included).
_ENV_DATA = getattr(os.environ, "_data", None)
try:
    _ENV_KEY = os.environ.encodekey("TORCH_DML_OPS_BACKEND")
except (AttributeError, TypeError):
    _ENV_KEY = None


def _read_mode() -> str:
    if isinstance(_ENV_DATA, dict) and _ENV_KEY is not None:
        raw = _ENV_DATA.get(_ENV_KEY)
        return "auto" if raw is None else os.environ.decodevalue(raw)
    return os.environ.get("TORCH_DML_OPS_BACKEND", "auto")


def requested_backend() -> str:
    mode = _read_mode()
    if mode in BACKENDS:
        return mode
    mode = mode.strip().lower() or "auto"
    if mode not in BACKENDS:
        raise ValueError(
            f"TORCH_DML_OPS_BACKEND={mode!r} is not one of {', '.join(BACKENDS)}"
        )
    return mode


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _choose(is_cpu: bool, is_cuda: bool) -> str:
    """The one backend decision: ``"triton"``, ``"native"`` or ``"torch"``, from the mode (read
    once) and where the tensors live."""
    mode = requested_backend()
    if mode == "auto":
        if is_cuda and triton_available():
            return "triton"
        return "native" if is_cpu and _native.available() else "torch"
    if mode == "native":
        if not is_cpu:
            return "torch"      # the C kernels are CPU kernels; the portable path elsewhere
        if not _native.available():
            raise RuntimeError(f"TORCH_DML_OPS_BACKEND=native but {_native.import_error()}")
        return "native"
    if mode == "torch":
        return "torch"
    # mode == "triton": forced
    if not triton_available():
        raise RuntimeError(
            f"TORCH_DML_OPS_BACKEND=triton but the Triton kernels cannot be imported "
            f"({triton_import_error()})"
        )
    if is_cpu and not interpreting():
        raise RuntimeError(
            "TORCH_DML_OPS_BACKEND=triton on CPU tensors needs TRITON_INTERPRET=1 (set before "
            "triton is imported) to run the kernels in triton's interpreter"
        )
    return "triton"


def backend_for(t: torch.Tensor) -> str:
    """The backend for one call on tensors living where ``t`` does (``is_cpu``/``is_cuda`` are
    ~0.15 us, ``device.type`` ~1 us: this runs on every call).  A native or Triton wrapper that
    does not cover a call (a dtype or layout) hands it to the portable path."""
    return _choose(t.is_cpu, t.is_cuda)


def use_triton(device: torch.device) -> bool:
    """Whether a call on tensors living on ``device`` runs the Triton kernel."""
    return _choose(device.type == "cpu", device.type == "cuda") == "triton"


def use_native(device: torch.device) -> bool:
    """Whether a call on tensors living on ``device`` runs the native C kernels."""
    return _choose(device.type == "cpu", device.type == "cuda") == "native"


def available_backends() -> list:
    """(name, device, why) for every backend that can run here, for the demo and the benchmarks."""
    rows = [("torch", "cpu", "portable path")]
    if _native.available():
        rows.append(("native", "cpu", "native C kernels"))
    if torch.cuda.is_available():
        rows.append(("torch", "cuda", "portable path"))
        if triton_available():
            rows.append(("triton", "cuda", "compiled Triton kernel"))
    if triton_available() and interpreting():
        rows.append(("triton", "cpu", "Triton interpreter (TRITON_INTERPRET=1)"))
    return rows


def plain_eager_call(tensors, differentiable) -> bool:
    """Whether nothing can observe a call below the public function, so it may run the op's
    kernel directly instead of going through the dispatcher.

    Dispatching a Python-kernel op (autograd kernel, then backend kernel) costs ~15-20 us on a
    small CPU, more than a small gather itself.  The shortcut is taken only when the result is
    indistinguishable: eager mode (not torch.compile / export / jit tracing), plain tensors (no
    subclass, FakeTensor or functorch wrapper), no dispatch or function modes, no profiler, no
    open forward-AD level, and no input that autograd would record (``differentiable`` lists
    those).  Everything else goes
    through ``torch.ops.torch_dml_ops.*``, which is also what compiled graphs and exports contain.
    """
    if torch.compiler.is_compiling() or torch._C._get_tracing_state() is not None:
        return False
    for t in tensors:
        if type(t) is not torch.Tensor or t.is_meta:
            return False
    if torch.is_grad_enabled():
        for t in differentiable:
            if t.requires_grad:
                return False
    if torch._C._len_torch_dispatch_stack() or torch._C._is_torch_function_mode_enabled():
        return False
    if torch._C._functorch.peek_interpreter_stack() is not None:
        return False
    if _fwad._current_level >= 0:       # a forward-AD level is open: inputs may be dual
        return False
    return not torch.autograd.profiler._is_profiler_enabled


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
