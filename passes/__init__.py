"""Built-in passes, one per module; importing this package registers them all.

``profile`` is imported first: it is the first registered provider of ``cost`` and ``mem``, so the
pass manager runs it (analytical mode) when a pipeline needs costs that are missing. The
``place_*`` modules register their algorithms with ``place{algo=...}``; ``fuse`` also registers
the ``topo-order`` analysis pass.
"""

from graphir.passes import profile  # isort: skip  (first provider of cost/mem)
from graphir.passes import (
    calibrate_comm,
    critical_path,
    data_parallel,
    dce,
    fuse,
    place,
    place_baechi,
    place_celeritas,
    place_expert,
    place_fastt,
    place_heft,
    place_ilp,
    place_metis,
    place_os_dpos,
    schedule,
    simulate,
    split,
    strip_annotations,
    verify_acyclic,
)

__all__ = [
    "calibrate_comm",
    "critical_path",
    "data_parallel",
    "dce",
    "fuse",
    "place",
    "place_baechi",
    "place_celeritas",
    "place_expert",
    "place_fastt",
    "place_heft",
    "place_ilp",
    "place_metis",
    "place_os_dpos",
    "profile",
    "schedule",
    "simulate",
    "split",
    "strip_annotations",
    "verify_acyclic",
]
