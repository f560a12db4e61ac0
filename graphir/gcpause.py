"""Pausing Python's cyclic garbage collector while large object graphs are built.

Importing or parsing a 100k-node model allocates millions of tracked objects and no garbage; with
the collector on, repeated generation-2 collections over the growing graph cost 40-60% of the time.
Re-enabling the collector after such a pause is not free either: the first allocation afterwards
starts a collection of the young generation, which now holds every object built during the pause
(about 0.5 s for 100k nodes). A one-shot process (``graphir-opt``) calls :func:`freeze_after_pauses`
so that what a pause built moves to the permanent generation (:func:`gc.freeze`) instead: no
collection ever walks the imported graph again, while garbage made later is still collected. A
frozen object in a reference cycle is freed only at exit, which is why a library (and the tests,
which build thousands of modules) keeps the default.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

_freeze = False


def freeze_after_pauses(enabled: bool = True) -> None:
    """Make :func:`gc_paused` freeze what exists when it ends (for one-shot processes)."""
    global _freeze
    _freeze = enabled


@contextlib.contextmanager
def gc_paused(*, freeze: bool = True) -> Iterator[None]:
    """Disable the cyclic collector inside the block (restoring its previous state afterwards).

    Args:
        freeze: whether a one-shot process (:func:`freeze_after_pauses`) freezes what exists when
            the block ends. False for a block that builds trial graphs and drops most of them
            (``parallelize``'s finalists): frozen, a dropped graph's reference cycles would be kept
            until exit. Such a block frees what it drops itself (:meth:`graphir.ir.Graph.release`).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if _freeze and freeze:
                gc.freeze()
            gc.enable()
