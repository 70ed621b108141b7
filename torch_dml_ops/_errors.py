"""The library's exception types (every error a user can trigger is one of these, or the
IndexError / TypeError / RuntimeError torch itself would raise)."""
from __future__ import annotations

__all__ = ["ConstraintError", "ConstraintIndexError", "ConstraintTypeError", "MemoryOverlapError"]


class ConstraintError(ValueError):
    """A documented tensor constraint of the operator (or of the active feature level) is violated.

    The message names the tensor (``InputTensor``, ``IndicesTensor`` ...), the rule, the feature
    level and the offending value.
    """


class ConstraintIndexError(ConstraintError, IndexError):
    """An axis out of range: both a :class:`ConstraintError` and the ``IndexError`` that torch
    raises for a dimension out of range."""


class ConstraintTypeError(ConstraintError, TypeError):
    """A data type that the operator (or the active feature level) does not support.

    Both a :class:`ConstraintError` (so a ``ValueError``) and a ``TypeError``, which is what torch
    raises for unsupported dtypes.
    """


class MemoryOverlapError(ConstraintError, RuntimeError):
    """A written-to tensor overlaps itself or an input: the ``RuntimeError`` torch raises for
    such writes ("unsupported operation: ... refer to a single memory location"), and a
    :class:`ConstraintError` (so a ``ValueError``) like the library's other argument errors."""
