"""Built-in passes, one per module; importing this package registers them all.

``profile`` is imported first: it is the first registered provider of ``cost`` and ``mem``, so the
pass manager runs it (analytical mode) when a pipeline needs costs that are missing.
"""

from graphir.passes import profile  # isort: skip  (first provider of cost/mem)
from graphir.passes import (  # fuse also registers topo-order
    calibrate_comm,
    critical_path,
    dce,
    fuse,
    place,
    schedule,
    simulate,
    strip_annotations,
    verify_acyclic,
)

__all__ = [
    "calibrate_comm",
    "critical_path",
    "dce",
    "fuse",
    "place",
    "profile",
    "schedule",
    "simulate",
    "strip_annotations",
    "verify_acyclic",
]
