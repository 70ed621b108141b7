"""DirectML feature levels: names, the per-thread level in force, and ``feature_level``."""
from __future__ import annotations

import threading
from typing import Optional

from . import _data
from ._errors import message
from ._types import FeatureLevelName

__all__ = ["feature_level", "get_feature_level", "normalize_feature_level", "FEATURE_LEVELS",
           "PERMISSIVE"]

#: The permissive default: every dtype this library supports, any rank, negative indices.
PERMISSIVE = "permissive"
#: DirectML feature levels whose tables we enforce, oldest first.
FEATURE_LEVELS = _data.FEATURE_LEVELS

_ALIASES = {lvl: lvl for lvl in FEATURE_LEVELS}
_ALIASES.update({lvl.replace("_", "."): lvl for lvl in FEATURE_LEVELS})
_ALIASES.update({"FEATURE_LEVEL_" + lvl: lvl for lvl in FEATURE_LEVELS})
_ALIASES.update({"DML_FEATURE_LEVEL_" + lvl: lvl for lvl in FEATURE_LEVELS})
_ALIASES.update({PERMISSIVE: PERMISSIVE, "": PERMISSIVE, "default": PERMISSIVE})

class _LevelState(threading.local):
    """The level in force, per thread.  A threading.local attribute (not a ContextVar) because
    torch.compile traces reads and writes of it, so ``with feature_level(...)`` may sit inside a
    compiled function without a graph break, and a changed level re-guards compiled code."""

    def __init__(self) -> None:
        self.level = PERMISSIVE
        self.saved: list = []       # levels to restore, innermost last (feature_level)


_state = _LevelState()


def normalize_feature_level(level: Optional[str]) -> str:
    """Canonical spelling of a feature level: ``"2_1"``, ``"3_0"``, ``"3_1"`` or ``"permissive"``.

    Accepts ``None`` (permissive), ``"2.1"``, ``"FEATURE_LEVEL_2_1"``, ``"DML_FEATURE_LEVEL_2_1"``.
    """
    if level is None:
        return PERMISSIVE
    if not isinstance(level, str):
        raise TypeError(f"feature level must be a str or None, got {type(level).__name__}")
    canon = _ALIASES.get(level.strip(), _ALIASES.get(level.strip().upper()))
    if canon is None:
        raise ValueError(
            f"unknown DirectML feature level {level!r}: expected one of "
            f"{', '.join(FEATURE_LEVELS)} or None (permissive)"
        )
    return canon


class feature_level:
    """Enforce the tensor-support tables of a DirectML feature level inside a ``with`` block.

    ``with tdo.feature_level("2_1"): ...`` makes every op called in the block (in this thread)
    check its inputs against the tables of ``DML_FEATURE_LEVEL_2_1``: data types, index types,
    dimension counts, negative indices, batch dimensions.  ``None`` restores the permissive
    default.  Blocks nest.  The public functions read the level once per call and pass it to the
    registered op as its ``feature_level`` argument; kernels never read hidden state.
    """

    def __init__(self, level: Optional[FeatureLevelName]) -> None:
        self.level = normalize_feature_level(level)

    # The level to restore is kept on the thread's own stack (``with`` blocks nest per thread),
    # never on the object: one object may be entered in several threads at once, and nested in
    # one, and each thread gets back its own level.
    def __enter__(self) -> str:
        _state.saved.append(_state.level)
        _state.level = self.level
        return self.level

    def __exit__(self, *exc) -> None:
        _state.level = _state.saved.pop()


def get_feature_level() -> str:
    """The feature level in force here (``"permissive"`` outside any ``feature_level`` block)."""
    return _state.level


def level_at_least(level: str, minimum: str) -> bool:
    """Whether an explicit level is ``minimum`` or newer (the permissive level counts as newest)."""
    if level == PERMISSIVE:
        return True
    return FEATURE_LEVELS.index(level) >= FEATURE_LEVELS.index(minimum)


def level_name(level: str) -> str:
    return _data.PERMISSIVE_NAME if level == PERMISSIVE else f"DML_FEATURE_LEVEL_{level}"


def check_level_argument(level: str) -> None:
    """The op's ``feature_level`` argument, as passed to ``torch.ops.torch_dml_ops.*``."""
    if level not in _ALIASES or _ALIASES[level] != level:
        raise ValueError(message("level_argument", level=repr(level),
                                 levels=", ".join(FEATURE_LEVELS)))
