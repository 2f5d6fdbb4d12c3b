"""Deep-frozen containers for tool arguments and schemas.

``FrozenDict`` and ``FrozenList`` subclass ``dict`` and ``list`` so every reader (``json.dumps``,
``isinstance(x, dict)``, ``==``) keeps working, while any mutation raises ``TypeError`` mentioning
"frozen value". ``dict(frozen)`` / ``list(frozen)`` make a shallow, mutable copy (nested values
stay frozen); ``copy``, ``deepcopy`` and ``pickle`` keep the frozen types.
"""

from __future__ import annotations

import copy
from typing import Any, NoReturn

from . import _core

__all__ = ["FrozenDict", "FrozenList", "deep_freeze"]


def _refuse(self: Any, *args: Any, **kwargs: Any) -> NoReturn:
    raise TypeError(
        f"{type(self).__name__} is a frozen value: tool arguments and schemas cannot be changed "
        "in place; copy it first (dict(x) / list(x), a shallow copy)"
    )


class FrozenDict(dict):  # type: ignore[type-arg]
    """A ``dict`` that refuses mutation. ``FrozenDict(x)`` is shallow; see ``deep_freeze``."""

    __slots__ = ()
    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset((k, _hashable(v)) for k, v in self.items()))

    def __reduce__(self) -> Any:
        return (FrozenDict, (dict(self),))

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenDict:
        # A shallow FrozenDict may hold mutable values: copy them (frozen ones return themselves).
        return FrozenDict({copy.deepcopy(k, memo): copy.deepcopy(v, memo) for k, v in self.items()})

    def __repr__(self) -> str:
        return f"FrozenDict({dict.__repr__(self)})"


class FrozenList(list):  # type: ignore[type-arg]
    """A ``list`` that refuses mutation. ``FrozenList(x)`` is shallow; see ``deep_freeze``."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = clear = extend = insert = pop = remove = reverse = sort = _refuse

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(_hashable(v) for v in self))

    def __reduce__(self) -> Any:
        return (FrozenList, (list(self),))

    def __copy__(self) -> FrozenList:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenList:
        return FrozenList(copy.deepcopy(v, memo) for v in self)

    def __repr__(self) -> str:
        return f"FrozenList({list.__repr__(self)})"


def _hashable(v: Any) -> Any:
    if isinstance(v, dict):
        return frozenset((k, _hashable(x)) for k, x in v.items())
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    return v


def deep_freeze(value: Any) -> Any:
    """Return ``value`` with every dict, list and tuple inside it frozen (recursively).

    Dicts become ``FrozenDict``, lists ``FrozenList``, tuples (except named tuples) stay tuples
    of frozen items; other values are returned as they are. Raises ``RecursionError`` past 1000
    levels of nesting. Runs in the Rust core (it is on every call's path).
    """
    return _core.deep_freeze(value, FrozenDict, FrozenList)

