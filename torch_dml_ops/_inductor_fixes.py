"""A fix for a torch Inductor bug that made compiled in-place writes into views land in the
wrong place (docs/upstream-inductor-view-offset.md has the pure-torch repro).

The bug (torch 2.13; pytorch/pytorch#198068): Inductor has no lowering for
``aten.sym_storage_offset``.  Under dynamic shapes the functionalized call of an op that mutates
a view (``scatter_nd_(cache[l], ...)``, ``out=cache[l]``) regenerates the view in the post-grad
graph as ``as_strided(base, size, stride, sym_storage_offset(view))``; without a lowering that
node becomes an implicit fallback, which re-runs the op on a tensor rebuilt from the IR node by
``ir_node_to_tensor`` with the node's sizes and strides but never its storage offset, so it
lowers to 0 and the op writes at the base's start (a KV-cache's layer 0).

The fix is the lowering torch has for the op's siblings (``sym_size.int``, ``sym_stride.int``):
the value is the node's traced metadata.  It is registered only once Inductor's lowering module
is loaded (importing it costs seconds), and only where torch has no lowering of its own (an
implicit fallback made by an earlier compile is replaced): a torch that fixes the bug is left
alone.  It is process-wide, so other mutating custom ops compiled in the process get it too.
"""
from __future__ import annotations

import sys

import torch

_OP = torch.ops.aten.sym_storage_offset.default
_done = False


def _sym_storage_offset(a):
    from torch._inductor.virtualized import V
    val = V.graph.current_node.meta["val"]
    return val.node.expr if isinstance(val, torch.SymInt) else int(val)


def lower_storage_offset() -> None:
    """Register the lowering if Inductor is loaded and lacks one.  Called at import and by the
    fake kernels of the ops that mutate an argument: Inductor traces them (AOTAutograd, in
    ``torch.compile`` and AOTInductor) after importing its lowerings and before lowering."""
    global _done
    if _done:
        return
    lowering = sys.modules.get("torch._inductor.lowering")
    if lowering is None or getattr(lowering.__spec__, "_initializing", False):
        return          # not loaded (or still loading): nothing lowers the op yet
    _done = True
    if _OP in lowering.lowerings and _OP not in lowering.fallbacks:
        return          # torch's own lowering
    lowering.fallbacks.discard(_OP)
    lowering.register_lowering(_OP, type_promotion_kind=None)(_sym_storage_offset)
