"""Autograd for the ops: one ``torch.autograd.Function`` per op, registered as its Autograd kernel.

Why not ``torch.library.register_autograd``: in torch 2.13 the ``autograd.Function`` it generates
has no ``setup_context``, so every torch.func transform (``grad``, ``jacrev``, ``vjp``,
``hessian``, grad of vmap) refuses it, and it has no forward-mode derivative, so ``jvp``,
``jacfwd`` and ``torch.autograd.forward_ad`` silently see zero tangents.  Here each op gets a
Function with:

* ``forward`` (no ``ctx``): the op below the Autograd key;
* ``setup_context``: what backward and jvp need;
* ``backward`` and ``jvp``, written with the registered ops (so they are differentiable again:
  double backward, forward-over-reverse);
* ``generate_vmap_rule = True``: under vmap, forward/backward/jvp run on batched tensors through
  the ops' own vmap rules.

The Function is applied only when something will look at a derivative (grad mode with an input
that requires grad, a forward-AD level, or a torch.func transform): by the public functions
directly (``Differentiable.call``; torch.func wants an autograd.Function applied before the
dispatcher), and by the Autograd kernel for ``torch.ops`` callers and traced graphs.  Otherwise
the op runs below autograd, as with the kernel torch would generate.  The ``out=`` overloads get a
kernel that refuses autograd, like torch's ``out=`` functions.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch

from ._backend import backend_key, eager_keyset
from ._checks import check_level
from ._compat import (apply_through_functorch, below_autograd_guard, forward_ad_active,
                      forward_ad_level_open, function_applier, functorch_active, redispatcher)
from ._levels import PERMISSIVE
from ._library import NAMESPACE, lib


def below_autograd(op, redispatch, tensors, args, kwargs):
    """Run ``op`` below the Autograd key (an Autograd kernel with nothing to record): straight
    to the backend kernel for plain CPU/CUDA tensors (``backend_key``; cheaper than masking
    the dispatcher's key set: M1 in docs/benchmarks.md, "Measured choices"), else through the
    dispatcher below autograd."""
    keyset = backend_key(tensors) if redispatch is not None else None
    if keyset is not None:
        return redispatch(keyset, *args, **kwargs)
    with below_autograd_guard():
        return op(*args, **kwargs)


def save_for_jvp(ctx, *tensors) -> None:
    """``ctx.save_for_forward`` where a jvp can follow: only a call made while a forward-AD
    level is open (torch.func's jvp opens one too) computes tangents, and it does so at once."""
    if forward_ad_level_open():
        ctx.save_for_forward(*tensors)


def derivative_needed(tensors: Sequence) -> bool:
    """Whether a call on ``tensors`` (the op's tensor arguments) must be recorded by autograd
    (either mode) or torch.func.  Runs on every call, so cheaper than torch's
    ``_any_requires_grad`` (M2 in docs/benchmarks.md, "Measured choices")."""
    if functorch_active() or forward_ad_active():
        return True
    if torch.is_grad_enabled():
        for t in tensors:
            if t.requires_grad:
                return True
    return False


def defaults_filler(schema) -> Callable:
    """``fill(args, kwargs)``: every (non keyword-only) argument of a call of ``schema``
    positionally, its defaults filled in, as a kernel's arguments arrive from the dispatcher
    (defaults dropped, some by name).  torch's ``_library.utils.fill_defaults`` does the same
    but reads ``schema.arguments``, which builds a new list on each read, once per argument."""
    params = [(a.name, a.default_value) for a in schema.arguments if not a.kwarg_only]
    n = len(params)

    def fill(args, kwargs) -> tuple:
        if len(args) == n:
            return tuple(args)
        return tuple(args) + tuple(kwargs[name] if name in kwargs else default
                                   for name, default in params[len(args):])
    return fill


class LevelRules:
    """The feature level's rules for the ``torch.ops`` callers of one op: the C++ kernels ignore
    ``feature_level`` (csrc/checks.h: they keep only the rules memory safety needs), so an op's
    Autograd kernel runs the Python checks (``check``, on the op's positional arguments) for a
    call at a DirectML level before the call reaches a kernel.  At the permissive default it
    costs one comparison.  (The public functions check before they call; the fake kernels when
    compiling and exporting.)"""

    def __init__(self, schema, check: Callable) -> None:
        self.at = [a.name for a in schema.arguments].index("feature_level")
        self.check = check
        self.fill = defaults_filler(schema)

    def __call__(self, args, kwargs) -> None:
        at = self.at
        # (a plain call's arguments arrive without their defaults: args shorter, kwargs empty)
        if (args[at] != PERMISSIVE if len(args) > at
                else kwargs and kwargs.get("feature_level", PERMISSIVE) != PERMISSIVE):
            check_level(lambda: self.check(*self.fill(args, kwargs)))


class _Const:
    """A list argument (a shape) passed to ``Function.apply`` as one opaque leaf: torch.func's
    generated vmap rule flattens the arguments as a pytree and would count a shape's ints as
    separate inputs."""
    __slots__ = ("value",)

    def __init__(self, value) -> None:
        self.value = value


def _unwrap(args):
    return tuple(a.value if isinstance(a, _Const) else a for a in args)


def make_function(name: str, op, setup_context: Callable, backward: Callable,
                  jvp: Callable, n_tensors: int = 1) -> type:
    """An ``autograd.Function`` whose forward is ``op`` below autograd (schema defaults filled),
    for torch.func transforms (list arguments arrive as ``_Const``).  Its attribute ``plain`` is
    the same Function for every other call, without the ``_Const`` handling (what the eager
    path applies: ``Differentiable``)."""

    redispatch = redispatcher(op)

    def forward(*args):
        keyset = backend_key(args[:n_tensors]) if redispatch is not None else None
        if keyset is not None:
            return redispatch(keyset, *args)
        with below_autograd_guard():
            return op(*args)

    formulas = {"backward": staticmethod(backward), "jvp": staticmethod(jvp)}
    plain = type(name, (torch.autograd.Function,), {
        "forward": staticmethod(forward),
        "setup_context": staticmethod(setup_context),
        **formulas,
    })
    function = type(name, (torch.autograd.Function,), {
        "generate_vmap_rule": True,
        "forward": staticmethod(lambda *args: forward(*_unwrap(args))),
        "setup_context": staticmethod(
            lambda ctx, inputs, output: setup_context(ctx, _unwrap(inputs), output)),
        **formulas,
    })
    function.plain = plain      # type: ignore[attr-defined]
    return function


def _wrap(args):
    return tuple(_Const(a) if isinstance(a, (list, tuple)) else a for a in args)


class Differentiable:
    """An op and its Function: ``call`` is how the public functions, and the backward and jvp
    formulas, invoke the op.

    An ``autograd.Function`` must be applied before the dispatcher (torch.func dispatches it as a
    higher-order op through its own interpreters), so ``call`` applies it directly when a
    derivative is needed in eager mode.  Everything else goes through ``torch.ops`` (the
    dispatcher), whose Autograd kernel applies the same Function: that is what torch.compile and
    torch.export trace, and what direct ``torch.ops.torch_dml_ops.*`` callers get.
    """

    def __init__(self, opname: str, function: type, prepare: Optional[Callable] = None,
                 n_tensors: int = 1, check: Optional[Callable] = None) -> None:
        self.op = getattr(getattr(torch.ops, NAMESPACE), opname).default
        self.function = function
        self.prepare = prepare
        # check: the op's Python checks (LevelRules), for an op with a feature_level
        self._levels = LevelRules(self.op._schema, check) if check is not None else None
        self.n_tensors = n_tensors          # the leading tensor arguments
        # Outside torch.func transforms: the plain Function, without torch's Python wrapper.
        self._apply = function_applier(getattr(function, "plain"), n_tensors)
        self._fill = defaults_filler(self.op._schema)
        self._redispatch = redispatcher(self.op)
        lib.impl(opname, self._kernel, "Autograd")

    def call(self, *args):
        """The op on full positional arguments, recorded for autograd/torch.func if needed: how
        the backward and jvp formulas invoke it (through the dispatcher otherwise)."""
        if derivative_needed(args[:self.n_tensors]):
            return self._record(args)
        return self.op(*args)

    def call_public(self, *args):
        """``call`` for the public functions: in plain eager mode without a derivative it goes
        straight to the backend kernel the dispatcher would pick (the same registered kernel,
        below the Autograd key), skipping the Python Autograd kernel, which costs as much as a
        small call (docs/benchmarks.md, the per-call table)."""
        tensors = args[:self.n_tensors]
        if derivative_needed(tensors):
            return self._record(args)
        keyset = eager_keyset(tensors) if self._redispatch is not None else None
        if keyset is not None:
            return self._redispatch(keyset, *args)
        return self.op(*args)

    def _record(self, args):
        """A call that needs a derivative, from Python: the Function applied (eagerly), or the
        op through the dispatcher, whose Autograd kernel applies it (under torch.compile, which
        traces the dispatcher's path)."""
        if torch.compiler.is_compiling():
            return self.op(*args)
        if self.prepare is not None:
            args = self.prepare(args)
        if functorch_active():
            return self.function.apply(*_wrap(args))
        return self._apply(*args)

    def _kernel(self, *args, **kwargs):
        levels = self._levels
        if levels is not None and (len(args) > levels.at or kwargs):
            levels(args, kwargs)
        tensors = args[:self.n_tensors]
        if derivative_needed(tensors):
            args = self._fill(args, kwargs)
            if self.prepare is not None:
                args = self.prepare(args)
            if functorch_active():
                # reached through torch.ops inside a torch.func transform
                return apply_through_functorch(self.function, _wrap(args), str(self.op))
            return self._apply(*args)
        return below_autograd(self.op, self._redispatch, tensors, args, kwargs)


class OutOverload:
    """An ``out=`` overload: its Autograd kernel refuses autograd, like torch's ``out=``
    functions; ``call`` is how the public functions invoke it."""

    def __init__(self, opname: str, public_name: str, n_tensors: int, check: Callable) -> None:
        self.op = getattr(getattr(torch.ops, NAMESPACE), opname).default
        self.public_name = public_name
        self._levels = LevelRules(self.op._schema, check)
        self.n_tensors = n_tensors          # the leading tensor arguments (out aside)
        self._redispatch = redispatcher(self.op)
        lib.impl(opname, self._kernel, "Autograd")

    def _refuse_grad(self) -> None:
        raise RuntimeError(        # torch's message for its own out= functions
            f"{self.public_name}(): functions with out=... arguments don't support automatic "
            f"differentiation, but one of the arguments requires grad.")

    def _kernel(self, *args, **kwargs):
        self._levels(args, kwargs)      # (kwargs holds out)
        tensors = (kwargs["out"],) + args[:self.n_tensors]
        self.refuse_grad(tensors)
        return below_autograd(self.op, self._redispatch, tensors, args, kwargs)

    def refuse_grad(self, tensors) -> None:
        """torch's refusal of an ``out=`` call where a tensor requires grad (under grad mode).
        Plain attribute reads, which dynamo traces."""
        if torch.is_grad_enabled():
            for t in tensors:
                if isinstance(t, torch.Tensor) and t.requires_grad:
                    self._refuse_grad()

    def call(self, tensors, *args, out):
        """``tensors``: the inputs and ``out``, for the refusal and the eager shortcut (as in
        ``Differentiable.call``)."""
        self.refuse_grad(tensors)
        keyset = eager_keyset(tensors) if self._redispatch is not None else None
        if keyset is not None:
            return self._redispatch(keyset, *args, out=out)
        return self.op(*args, out=out)
