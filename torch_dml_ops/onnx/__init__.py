"""torch_dml_ops.onnx: export models that call the ops to standard ONNX (opset 18).

``gather_nd`` becomes GatherND, ``scatter_nd`` ScatterND, ``top_k1`` TopK, with a few extra
standard nodes where onnxruntime's semantics or kernels differ from eager (see docs/onnx.md)::

    import torch_dml_ops.onnx as tdo_onnx
    onnx_program = tdo_onnx.export(model, args, dynamic_shapes=...)
    onnx_program.save("model.onnx")

    # or torch's exporter itself, with the translations (and, for the in-place and out=
    # overloads, the exporting() context):
    with tdo_onnx.exporting():
        torch.onnx.export(model, args, dynamo=True,
                          custom_translation_table=tdo_onnx.translation_table())

Needs onnx, onnxscript and onnxruntime: ``pip install -e ".[onnx]"``.
"""
from __future__ import annotations

import contextlib
import copy
import threading
import warnings
from typing import Any, Callable, Dict, Iterator, Optional

try:
    import onnx  # noqa: F401
    import onnxscript  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised by the packaging test's message check
    raise ImportError(
        f"torch_dml_ops.onnx needs onnx and onnxscript ({e}); install them with "
        f"pip install -e \".[onnx]\" (onnx, onnxscript, onnxruntime)") from e

import torch

from .. import _compat
from .._errors import ConstraintError
from . import _translations, _views
from ._translations import OPSET, OnnxExportError

__all__ = ["export", "translation_table", "exporting", "OnnxExportError", "OPSET"]

_ops = torch.ops.torch_dml_ops


def translation_table(opset: int = OPSET) -> Dict[Callable, Callable]:
    """``{op overload: translation}`` for ``torch.onnx.export(..., dynamo=True,
    custom_translation_table=...)``.  The functional overloads are translated; the ``out=`` and
    in-place ones reach the exporter as these once :func:`exporting` is active."""
    if opset < OPSET:
        raise OnnxExportError(
            f"torch_dml_ops.onnx: opset {opset} is below {OPSET}, the opset the translations use "
            f"(ScatterND's max/min reductions need 18, add/mul 16, GatherND's batch_dims 12)")
    return {
        _ops.gather_nd.default: _translations.gather_nd,
        _ops.scatter_nd.default: _translations.scatter_nd,
        _ops.top_k1.default: _translations.top_k1,
    }


# exporting(): the out= and in-place overloads as functional op + copy_ ----------------------

def _gather_nd_out(input, indices, batch_dims=0, input_dimension_count=None,
                   indices_dimension_count=None, feature_level="permissive", check_indices=True,
                   *, out):
    out.copy_(_ops.gather_nd(input, indices, batch_dims, input_dimension_count,
                             indices_dimension_count, feature_level, check_indices))


def _scatter_nd_out(input, indices, updates, reduction="none", input_dimension_count=None,
                    indices_dimension_count=None, feature_level="permissive", check_indices=True,
                    deterministic=False, *, out):
    out.copy_(_ops.scatter_nd(input, indices, updates, reduction, input_dimension_count,
                              indices_dimension_count, feature_level, check_indices,
                              deterministic))


def _scatter_nd_(input, indices, updates, reduction="none", input_dimension_count=None,
                 indices_dimension_count=None, feature_level="permissive", check_indices=True,
                 deterministic=False):
    input.copy_(_ops.scatter_nd(input, indices, updates, reduction, input_dimension_count,
                                indices_dimension_count, feature_level, check_indices,
                                deterministic))


_FUNCTIONALIZE = {"gather_nd_out": _gather_nd_out, "scatter_nd_out": _scatter_nd_out,
                  "scatter_nd_": _scatter_nd_}
_lock = threading.Lock()
_depth = 0
_library = None


@contextlib.contextmanager
def exporting() -> Iterator[None]:
    """While active, functionalization (``torch.export``'s, hence the ONNX exporter's) rewrites
    ``gather_nd_out``, ``scatter_nd_out`` and ``scatter_nd_`` as the functional op followed by
    ``copy_`` into the target, which torch's view replay turns into standard ONNX (slices and
    transposes of a base included).  Without it they reach the exporter as
    ``auto_functionalized_v2``, which it cannot translate.  Not active by default because
    ``torch.compile`` and AOTInductor reinplace ``auto_functionalized_v2`` into the in-place
    kernel, while the rewritten form would copy the whole target.  Process-wide while active
    (the registration is a dispatcher kernel); nestable."""
    global _depth, _library
    with _lock:
        if _depth == 0:
            _library = torch.library.Library("torch_dml_ops", "IMPL")
            for name, fn in _FUNCTIONALIZE.items():
                _library.impl(name, fn, "Functionalize")
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                assert _library is not None     # registered while _depth > 0
                _compat.drop_library(_library)
                _library = None


def _our_error(exc: Optional[BaseException]):
    """The OnnxExportError/ConstraintError a translation or fake kernel raised, if the exporter
    wrapped one."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, ConstraintError):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def _capture(model, args, kwargs, dynamic_shapes):
    """``torch.export.export(strict=False)``, the exporter's own first strategy, refining the
    dynamic shapes as an error suggests as it does (torch's UserError carries them in .msg)."""
    try:
        return torch.export.export(model, tuple(args), kwargs, dynamic_shapes=dynamic_shapes,
                                   strict=False)
    except ConstraintError:
        raise
    except Exception as e:
        if dynamic_shapes is None or not isinstance(getattr(e, "msg", None), str):
            raise
        shapes = torch.export.dynamic_shapes.refine_dynamic_shapes_from_suggested_fixes(
            e.msg, dynamic_shapes)
        return torch.export.export(model, tuple(args), kwargs, dynamic_shapes=shapes,
                                   strict=False)


def _on_bases(model, args, kwargs, dynamic_shapes):
    """The model as an ExportedProgram whose writes into views are writes into their bases
    (``_views.writes_on_bases``), or the model itself where :func:`_capture` does not take it
    (the exporter then tries its own strategies) or the rewrite fails.  The exporter takes the
    program as it is: one capture per export."""
    if isinstance(model, torch.export.ExportedProgram):
        program = copy.deepcopy(model)
    elif isinstance(model, torch.nn.Module):
        try:
            program = _capture(model, args, kwargs, dynamic_shapes)
        except ConstraintError:
            raise
        except Exception:       # the exporter's own strategies report what fails
            return model
    else:
        return model
    try:
        _views.writes_on_bases(program)
    except Exception as e:      # a graph the rewrite misreads: the exporter's own capture
        _rewrite_failed(e)
        return model
    return program


def _rewrite_failed(exc: BaseException) -> None:
    warnings.warn(
        f"torch_dml_ops.onnx.export: the rewrite of writes into views failed ({exc!r}); the "
        f"model is exported as written (torch's view replay: exact, slower in onnxruntime). "
        f"Please report this with the model", RuntimeWarning, stacklevel=3)


def export(model, args=(), kwargs=None, *, dynamic_shapes=None, opset: int = OPSET,
           custom_translation_table=None, **export_kwargs: Any):
    """``torch.onnx.export(model, args, kwargs, dynamo=True, ...)`` with the ops' translations
    and :func:`exporting` active; returns torch's ``ONNXProgram``.  A call that no ONNX graph
    computes exactly raises :class:`OnnxExportError`, and a DirectML constraint violated under
    ``torch_dml_ops.feature_level(...)`` raises its ``ConstraintError`` (not wrapped in torch's
    exporter errors).  Writes into (and gathers from) views of a tensor are exported as
    ScatterND (GatherND) on the tensor itself, and consecutive writes into one tensor as one
    ScatterND (``_views.py``, docs/onnx.md)."""
    table = translation_table(opset)
    if custom_translation_table:
        table.update(custom_translation_table)
    export_kwargs.setdefault("verbose", False)

    def run(what):
        return torch.onnx.export(what, args, kwargs=kwargs, dynamo=True,
                                 dynamic_shapes=dynamic_shapes, opset_version=opset,
                                 custom_translation_table=table, **export_kwargs)

    with exporting():
        try:
            program = _on_bases(model, args, kwargs, dynamic_shapes)
            try:
                return run(program)
            except torch.onnx.errors.OnnxExporterError as e:
                if program is model or _our_error(e) is not None:
                    raise
                _rewrite_failed(e)      # the rewritten program fails where the model may not
                return run(model)
        except torch.onnx.errors.OnnxExporterError as e:
            ours = _our_error(e)
            if ours is None:
                raise
            raise ours.with_traceback(None) from e
