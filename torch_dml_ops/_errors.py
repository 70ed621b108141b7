"""The library's exception types (every error a user can trigger is one of these, or the
IndexError / TypeError / RuntimeError torch itself would raise)."""
from __future__ import annotations

import logging
import os

from ._data import MESSAGES

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


class _QuietRefusals:
    """A filter for torch's ``torch._subclasses.fake_tensor`` logger, which logs every TypeError a
    fake kernel raises at ERROR level with a full traceback ("fake tensor raised TypeError")
    before re-raising it.  Ours are documented refusals (``ConstraintTypeError``, an argument's
    type), which the caller gets as the exception itself: drop the log record of those, and
    only those, so the user sees the error once."""

    def filter(self, record) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None:
            return True
        if isinstance(exc, ConstraintError):
            return False
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        return tb is None or not tb.tb_frame.f_code.co_filename.startswith(_PACKAGE_DIR)


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def quiet_fake_tensor_refusals() -> None:
    """Install :class:`_QuietRefusals` (once; at import)."""
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    if not any(isinstance(f, _QuietRefusals) for f in logger.filters):
        logger.addFilter(_QuietRefusals())


def message(key: str, **fields: object) -> str:
    """The message of rule ``key`` (``_data.MESSAGES``, which the C++ kernels' are generated
    from) with its fields filled."""
    return MESSAGES[key].format(**fields)
