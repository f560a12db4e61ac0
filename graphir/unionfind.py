"""Disjoint sets (union-find) over hashable keys, with a deterministic representative.

Colocation classes, variable classes and merged fusion groups are all built by joining pairs and
asking for each member's class. The representative of a class is always its smallest member under
``order`` (default: the keys themselves), so results never depend on the order of the unions.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

if TYPE_CHECKING:
    from _typeshed import SupportsDunderLT

K = TypeVar("K", bound=Hashable)


class DisjointSets(Generic[K]):
    """Union-find with path halving; a key joins the structure on first use.

    Args:
        order: sort key deciding the representative (the smallest member); default the key itself.
    """

    def __init__(self, order: Callable[[K], Any] | None = None) -> None:
        self._parent: dict[K, K] = {}
        self._order = order

    def __contains__(self, key: object) -> bool:
        return key in self._parent

    def __iter__(self) -> Iterator[K]:
        return iter(self._parent)

    def __len__(self) -> int:
        return len(self._parent)

    def find(self, key: K) -> K:
        """The representative of ``key``'s class (``key`` itself when new)."""
        parent = self._parent
        parent.setdefault(key, key)
        while parent[key] != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    def union(self, a: K, b: K) -> K:
        """Join the classes of ``a`` and ``b``; the representative of the joined class."""
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return ra
        order = self._order
        # Without an ``order``, the keys are ordered themselves.
        first = (order(rb) < order(ra)) if order is not None else (cast("SupportsDunderLT[Any]", rb) < ra)
        if first:
            ra, rb = rb, ra
        self._parent[rb] = ra
        return ra
