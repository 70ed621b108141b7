"""The one place that knows torch versions apart (torch 2.10 on are supported: ``_data``'s
TORCH_FLOOR and TORCH_TESTED), and the one module that names torch's private APIs.

Feature probes, not version strings, where a feature can be probed.  Everything else in the
package uses public APIs common to every supported torch, and this module's names for the
private ones (``tests/test_packaging.py`` checks that no other module reaches for one).  Each
private API below says what it buys; each is probed at import: the ones the ops cannot work
without raise an ImportError naming what is missing, the eager shortcut's turn the shortcut off
(``EAGER_SHORTCUT``), and torch.func through ``torch.ops`` says it is unavailable when reached.
"""
from __future__ import annotations

import functools
import importlib
import re
import warnings
from typing import Any, Callable, Optional, Tuple

import torch

from ._data import TORCH_FLOOR, TORCH_TESTED


def release(version: str) -> Tuple[int, int]:
    """(major, minor) of a torch version string: "2.15.0+cu132" and "2.16.0.dev20261201" give
    (2, 15) and (2, 16); one that does not start with two numbers gives (0, 0)."""
    m = re.match(r"(\d+)\.(\d+)", str(version))
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


class UntestedTorchWarning(UserWarning):
    """Imported on a torch newer than the newest release this version was tested on."""


def check_torch_version(version: str) -> None:
    """The version policy at import (docs/packaging.md): below TORCH_FLOOR an ImportError that
    says what to install; above the newest of TORCH_TESTED one UntestedTorchWarning; between,
    nothing.  The C++ kernels load on any torch from the floor on (its stable ABI); the Python
    layer uses torch internals probed below, which a newer torch may have changed."""
    have, floor, newest = release(version), release(TORCH_FLOOR), release(TORCH_TESTED[-1])
    if have < floor:
        raise ImportError(
            f"torch_dml_ops needs torch >= {TORCH_FLOOR} (its C++ kernels use that release's "
            f"stable ABI); this is torch {version}. Upgrade torch (for example: pip install "
            f"'torch>={TORCH_FLOOR}'); installing torch_dml_ops never changes torch itself")
    if have > newest:
        warnings.warn(
            f"torch_dml_ops was tested on torch {TORCH_FLOOR} to {TORCH_TESTED[-1]}; this torch "
            f"{version} is newer: it should work, but is untested (please report what fails)",
            UntestedTorchWarning, stacklevel=2)


check_torch_version(torch.__version__)

import torch.autograd.forward_ad as _fwad  # noqa: E402  (after the version check)
from torch import _C  # noqa: E402
from torch.utils import _pytree  # noqa: E402


def _lookup(path: str) -> Any:
    """The object at a dotted path below ``torch`` (modules imported as needed), or None."""
    parts = path.split(".")
    obj: Any = torch
    for i, name in enumerate(parts):
        try:
            obj = getattr(obj, name)
        except AttributeError:
            try:
                obj = importlib.import_module(".".join(["torch"] + parts[:i + 1]))
            except ImportError:
                return None
    return obj


def _required(path: str, why: str) -> Any:
    found = _lookup(path)
    if found is None:
        raise ImportError(f"torch_dml_ops needs torch.{path} ({why}), which this torch "
                          f"{torch.__version__} lacks; tested: torch {TORCH_FLOOR} to "
                          f"{TORCH_TESTED[-1]}")
    return found


# ---- required: what the Autograd kernels and the Functions run on ----------------------------
#: Runs an op below the Autograd key (the Functions' forward; torch's own generated autograd
#: kernels use it the same way).
below_autograd_guard = _required("_C._AutoDispatchBelowAutograd", "running an op below autograd")
#: Whether a torch.func transform is active: every call asks, to record for torch.func.
functorch_active: Callable[[], bool] = _required(
    "_C._are_functorch_transforms_active", "torch.func support")
_fwd_grad_enabled = _required("_C._is_fwd_grad_enabled", "forward-mode AD")
if not hasattr(_fwad, "_current_level"):
    raise ImportError("torch_dml_ops needs torch.autograd.forward_ad._current_level "
                      "(forward-mode AD), which this torch lacks")


def forward_ad_level_open() -> bool:
    """Whether a forward-AD level is open (torch.func's jvp opens one too): dual tensors may
    exist.  One attribute read; the public alternative, unpacking every input, costs a call per
    tensor (M3 in docs/benchmarks.md, "Measured choices")."""
    return _fwad._current_level >= 0


def forward_ad_active() -> bool:
    """Whether a level is open and forward grad is enabled: a call may get tangents."""
    return _fwad._current_level >= 0 and _fwd_grad_enabled()


#: The dispatch key sets of the CPU and CUDA backend kernels, for ``redispatcher`` (the type
#: torch.library hands a ``with_keyset`` kernel).
CPU_KEYSET = _C.DispatchKeySet(_C.DispatchKey.CPU)
CUDA_KEYSET = _C.DispatchKeySet(_C.DispatchKey.CUDA)


def drop_library(lib: torch.library.Library) -> None:
    """Remove every registration ``lib`` made (``Library._destroy``, what torch's own tests
    and scoped libraries use): how a backend override or an ONNX export's temporary kernels end.
    Without it a registration cannot be undone, which this says."""
    destroy = getattr(lib, "_destroy", None)
    if destroy is None:
        raise RuntimeError(f"torch_dml_ops: this torch {torch.__version__} cannot remove "
                           f"a torch.library registration (no Library._destroy)")
    destroy()


def register_namedtuple(cls: type, name: str) -> None:
    """Register a NamedTuple with torch's pytree under a stable serialized name, so that
    ``torch.export.save`` can write a program that returns one (``_register_namedtuple``, what
    torch registers its own return types with).  Where torch lacks it, the tuple stays a
    plain pytree node: only saving such a program then fails, naming the type."""
    reg = getattr(_pytree, "_register_namedtuple", None)
    if reg is not None:
        reg(cls, serialized_type_name=name)


# ---- the eager shortcut: a public function straight to the backend kernel -----------------
# Skips the Python Autograd kernel (a good part of a small call: M4 in docs/benchmarks.md,
# "Measured choices") when nothing could observe the call below it.  Without any of these, the
# public functions go through the dispatcher like torch.ops callers.
_redispatch_attr = "redispatch_boxed"
_dispatch_stack_len = _lookup("_C._len_torch_dispatch_stack")
_profiler = _lookup("autograd.profiler")
_torch_function_mode = _lookup("_C._is_torch_function_mode_enabled")
EAGER_SHORTCUT = (None not in (_dispatch_stack_len, _torch_function_mode)
                  and hasattr(_profiler, "_is_profiler_enabled")
                  and hasattr(torch.ops.aten.add.Tensor, "_handle")
                  and hasattr(torch.ops.aten.add.Tensor._handle, _redispatch_attr))


def redispatcher(op) -> Optional[Callable]:
    """``op``'s redispatch to a given dispatch key set (boxed), or None where torch lacks it."""
    handle = getattr(op, "_handle", None)
    return getattr(handle, _redispatch_attr, None)


def nothing_intercepts() -> bool:
    """No torch-dispatch mode, profiler or torch.func transform that a call straight to a
    backend kernel would bypass (False where the probes are missing: take the dispatcher)."""
    return (EAGER_SHORTCUT and not _dispatch_stack_len()
            and not _profiler._is_profiler_enabled and not functorch_active())


def eager_and_unobserved() -> bool:
    """Plain eager mode: not compiling or jit tracing, no torch-function mode, no forward-AD
    level (dual tensors look like plain tensors)."""
    return (EAGER_SHORTCUT and not torch.compiler.is_compiling() and not torch.jit.is_tracing()
            and not _torch_function_mode() and _fwad._current_level < 0)


# ---- torch.func through torch.ops (the Autograd kernel inside a transform) -------------------
def apply_through_functorch(function: type, args: tuple, opname: str):
    """Apply ``function`` (an autograd.Function for torch.func) to ``args`` as torch.func does
    (the higher-order op custom_function_call through its interpreters), from an Autograd kernel
    reached through ``torch.ops`` inside a transform, below the functorch layer that dispatched
    there.  Raises a RuntimeError where torch lacks the pieces, or inside a forward-mode
    transform (functorch's jvp interpreter cannot be re-entered from inside its own processing
    of an op: an internal assert in torch 2.13)."""
    call = _lookup("_functorch.autograd_function.custom_function_call")
    dispatch = _lookup("_functorch.pyfunctorch.dispatch_functorch")
    stack_of = _lookup("_C._functorch.get_interpreter_stack")
    jvp = _lookup("_C._functorch.TransformType.Jvp")
    guard = _lookup("_C._ForceDispatchKeyGuard")
    tls_in = _lookup("_C._dispatch_tls_local_include_set")
    tls_ex = _lookup("_C._dispatch_tls_local_exclude_set")
    if None in (call, dispatch, stack_of, jvp, guard, tls_in, tls_ex):
        raise RuntimeError(
            f"{opname}: torch.func transforms through torch.ops.torch_dml_ops.* need torch "
            f"internals this torch {torch.__version__} lacks; call the public torch_dml_ops "
            f"function, which supports them")
    stack = stack_of()
    if stack and stack[-1].key() == jvp:
        raise RuntimeError(
            f"{opname}: forward-mode torch.func transforms (jvp, jacfwd, hessian of a "
            f"jvp) are not supported through torch.ops.torch_dml_ops.*; call the public "
            f"torch_dml_ops function, which supports them (reverse mode works either way)")
    # Grad or vmap: re-enable the functorch layers for this call, so that the transforms below
    # this one see the Function too.
    exclude = tls_ex()
    for key in (_C.DispatchKey.FuncTorchDynamicLayerFrontMode,
                _C.DispatchKey.FuncTorchDynamicLayerBackMode):
        exclude = exclude.remove(key)
    with guard(tls_in(), exclude):
        return dispatch(call, (function,) + tuple(args), {})

#: torch 2.10's AOTInductor hands a ScalarType argument of a custom op to the kernel as
#: torch.export's serialized enum value, not c10's (pytorch/pytorch#169157, fixed by #173562):
#: top_k1's index_dtype int64 arrives as float16, int32 as int64.  Not probeable without
#: compiling a package, hence a version: below 2.13, the first release tested without it.
AOTI_MISREADS_DTYPE_ARGS = torch.__version__ < "2.13"

#: Whether a DTensor leaf's gradient keeps the leaf's shards: from torch 2.13 on.  torch 2.10
#: replicates it where it passes DTensor's scatter strategy (the backward of top_k1 through its
#: sharding rule) or new_empty_strided (autograd's copy of a gradient whose strides differ from
#: the leaf's: uneven shards, as under the distributed top-k).  The values are the same.  Read
#: by the tests only.
DTENSOR_GRAD_KEEPS_SHARDS = torch.__version__ >= "2.13"


def exporting() -> bool:
    """Whether torch.export is tracing.  Not ``torch.compiler.is_exporting()`` below 2.13:
    torch 2.10's dynamo makes it True under every trace, torch.compile's included (where the
    shape checks it would enable specialize shapes); the flag behind it is set by export only."""
    flag = getattr(torch.compiler, "_is_exporting_flag", None)
    return torch.compiler.is_exporting() if flag is None else bool(flag)


def all_gather_single(tensor, gather_dim: int, group):
    """The tensors of every rank of ``group`` concatenated along ``gather_dim``, waited for:
    ``funcol.all_gather_single`` (torch 2.13 on); before, the same collective is
    ``all_gather_tensor``, which torch 2.14 deprecates (it warns on each call).  Functional
    collectives (private module): what DTensor's own ops use, and traceable by torch.compile."""
    from torch.distributed import _functional_collectives as funcol
    fn = getattr(funcol, "all_gather_single", None) or funcol.all_gather_tensor
    return funcol.wait_tensor(fn(tensor, gather_dim=gather_dim, group=group))


def dtensor_op_handlers():
    """DTensor's table of per-op handlers that replace its sharding propagation
    (``DTensor._op_dispatcher._custom_op_handlers``, private, in every supported torch), or
    None if a torch lacks it."""
    from torch.distributed.tensor import DTensor
    handlers = getattr(getattr(DTensor, "_op_dispatcher", None), "_custom_op_handlers", None)
    return handlers if isinstance(handlers, dict) else None


def fix_dtensor_ops_without_returns() -> None:
    """torch 2.10's DTensor fails sharding propagation of every op that returns nothing (an
    in-place op ``-> ()`` such as ``scatter_nd_``): ``OpSchema.return_type_tensor`` indexes the
    first return.  torch 2.13 checks for none first; this gives older releases the same check.
    Probed on such an op, so a torch that has the check is left untouched."""
    from torch.distributed.tensor._op_schema import OpSchema
    try:
        OpSchema(torch.ops.torch_dml_ops.scatter_nd_.default, (), {}).return_type_tensor()
        return
    except IndexError:
        pass
    unpatched = OpSchema.return_type_tensor

    def return_type_tensor(self) -> bool:
        return len(self.op._schema.returns) > 0 and unpatched(self)
    OpSchema.return_type_tensor = return_type_tensor  # type: ignore[method-assign]  # torch patch


def inplace_placement_refused(exc: BaseException) -> bool:
    """Whether ``exc`` is DTensor's refusal of an in-place op whose target would have to change
    placement: from torch 2.13 its own message; torch 2.10 fails the same call in sharding
    propagation with "min() arg is an empty sequence" (every strategy filtered out by the
    in-place rule: for ``scatter_nd_``, whose rules always offer all-Replicate, nothing else
    empties them)."""
    text = str(exc)
    return ("in-place operations that require placement changes" in text
            or ("Sharding propagation failed" in text and "scatter_nd_" in text
                and "min() arg is an empty sequence" in text))


def function_applier(function: "type[torch.autograd.Function]", n_tensors: int):
    """``function.apply`` (a ``torch.autograd.Function`` whose ``forward`` takes ``*args``, the
    first ``n_tensors`` of them tensors, the rest not) without torch's Python wrapper, for a
    call outside every torch.func transform (the caller's condition).  ``Function.apply`` binds
    the arguments to ``forward``'s signature with ``inspect.signature`` on every call (half of a
    small call, M5 in docs/benchmarks.md, "Measured choices"; a no-op for a ``*args`` forward),
    unwraps torch.func wrappers whose transform has exited, and hands the call to
    ``_C._FunctionBase.apply``, which runs forward and setup_context and records the node.
    This does the last two only.  Probed: where torch lacks either piece it is
    ``function.apply`` itself."""
    base = _lookup("_C._FunctionBase")
    unwrap = _lookup("_C._functorch.unwrap_if_dead")
    try:
        apply = base.__dict__["apply"].__get__(None, function)
    except (AttributeError, KeyError, TypeError):
        apply = None
    if apply is None or unwrap is None:
        return function.apply

    if n_tensors == 1:
        return lambda a, *rest: apply(unwrap(a), *rest)
    if n_tensors == 2:
        return lambda a, b, *rest: apply(unwrap(a), unwrap(b), *rest)

    def run(*args):
        return apply(*[unwrap(t) for t in args[:n_tensors]], *args[n_tensors:])
    return run


# ---- memory overlap ----------------------------------------------------------------------------
#: torch's own internal-overlap test (0 no, 1 yes, 2 too hard to tell), for an out= or in-place
#: target the Python backends write: one C++ call where the pure-Python test sorts the strides.
#: None where torch lacks it (_checks.has_internal_overlap then runs its own test).
debug_has_internal_overlap: Optional[Callable[[torch.Tensor], int]] = _lookup(
    "_debug_has_internal_overlap")


# ---- behaviour that differs between torch releases, probed -------------------------------------
@functools.lru_cache(maxsize=None)
def topk_refusal(dtype: torch.dtype) -> "type[Exception]":
    """The exception type ``torch.topk`` raises for an input of ``dtype`` it refuses, so that the
    drop-in ``topk`` raises the same: a complex input is a RuntimeError up to torch 2.14 and a
    TypeError from 2.15.  Probed once per dtype on a one-element CPU tensor; RuntimeError where
    this torch takes the dtype after all (``topk`` still refuses it: top_k1 has no complex)."""
    try:
        torch.topk(torch.zeros(1, dtype=dtype), 1)
    except Exception as e:  # whatever this torch raises is what the drop-in raises
        return type(e)
    return RuntimeError
