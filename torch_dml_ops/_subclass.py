"""The one way into ``torch_dml_ops.distributed`` (DTensor) from the rest of the package.

The public functions (``gather_nd``, ``scatter_nd``, ``scatter_nd_``, ``top_k1``) call ``route``
when their input is of a tensor subclass (``type(input) is not torch.Tensor``: a plain tensor
never gets here, so its calls pay that one type check), and ``refusal`` when such a call failed.
Everything DTensor-specific (which calls leave the op's own path, ``out=`` on DTensors, the
distributed top-k, their messages) lives in ``torch_dml_ops.distributed``, which this module
imports, inside the functions below, the first time a subclass reaches an op in a process that
has imported ``torch.distributed.tensor``: importing it registers the ops' sharding rules, and a
process that never uses DTensor never loads ``torch.distributed.tensor`` (M25 in
docs/benchmarks.md, "Measured choices").

A leaf of the package's import graph: nothing of the package is imported at module level.  The
op fronts import this module, ``distributed`` imports the fronts, and the one way back is the
import below, made in a call (the one lazy import of ``distributed``; tests/test_packaging.py
lists the package's lazy imports and checks that the graph has no cycle).
"""
from __future__ import annotations

import sys
from typing import Any, Optional

#: The module that defines DTensor: no DTensor exists in a process that has not imported it.
_DTENSOR_MODULE = "torch.distributed.tensor"


def route(op: str, input: Any, *args: Any) -> Any:
    """The result of the public function ``op`` called with ``input`` (a tensor of a subclass)
    and the rest of its arguments ``args`` (positionally, in its signature's order), where
    ``torch_dml_ops.distributed`` computes it (a DTensor call that leaves the op's own path),
    else None: the op's own path runs (for a DTensor, under the sharding rules, which importing
    ``distributed`` registered)."""
    if _DTENSOR_MODULE not in sys.modules:
        return None
    from .distributed import _fronts
    return _fronts.route(op, input, *args)


def refusal(op: str, exc: BaseException, *tensors: Any) -> Optional[BaseException]:
    """For a call of the public function ``op`` on a tensor of a subclass that raised ``exc``
    (``tensors``: the call's tensors, the subclass one first): the exception to raise instead,
    ``from exc`` (DTensor's refusal said in the op's terms), or None to let ``exc`` propagate."""
    if _DTENSOR_MODULE not in sys.modules:
        return None
    from .distributed import _fronts
    return _fronts.refusal(op, exc, *tensors)
