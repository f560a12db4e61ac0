"""Pausing Python's cyclic garbage collector while large object graphs are built.

Importing or parsing a 100k-node model allocates millions of tracked objects and no garbage; with
the collector on, repeated generation-2 collections over the growing graph cost 40-60% of the time.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Disable the cyclic collector inside the block (restoring its previous state afterwards)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
