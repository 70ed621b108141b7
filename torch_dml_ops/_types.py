"""The string options of the public functions as ``typing.Literal`` types, for type checkers.

The runtime checks are the authority and accept exactly what they accepted before these types
(feature levels also in any letter case and with surrounding spaces, which the types leave out).
"""
from __future__ import annotations

from typing import Literal

__all__ = ["Reduction", "Direction", "FeatureLevelName"]

#: ``scatter_nd``'s ``reduction`` (DML_REDUCE_FUNCTION, _tables.REDUCTIONS).
Reduction = Literal["none", "add", "mul", "max", "min"]

#: ``top_k1``'s ``direction`` as a string (top_k1._DIRECTION_NAMES); an ``AxisDirection`` also
#: works.
Direction = Literal["decreasing", "increasing",
                    "DECREASING", "INCREASING",
                    "DML_AXIS_DIRECTION_DECREASING", "DML_AXIS_DIRECTION_INCREASING"]

#: ``feature_level``'s names (_levels._ALIASES); ``None`` also means permissive.
FeatureLevelName = Literal[
    "2_1", "3_0", "3_1",
    "2.1", "3.0", "3.1",
    "FEATURE_LEVEL_2_1", "FEATURE_LEVEL_3_0", "FEATURE_LEVEL_3_1",
    "DML_FEATURE_LEVEL_2_1", "DML_FEATURE_LEVEL_3_0", "DML_FEATURE_LEVEL_3_1",
    "permissive", "default", "",
]
