"""This machine's cores, as this process may use them (the printer's and the TF rig's worker counts).

What the host CPU can do (its measured speed, the ``Nxcpu`` and ``Nxcpu-workers`` clusters built
from it, and their caches) is measured above the core, in the backends' host module: the core
reads no cache and benchmarks nothing.
"""

from __future__ import annotations

import os


def available_cores() -> list[int]:
    """The cores this process may run on (its affinity mask where the platform has one), ascending."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))
