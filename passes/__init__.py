"""Built-in passes; importing this package registers them all.

Layout: one algorithm per module, grouped by what the passes do.

* ``profile/``: the ``profile`` pass (analytical roofline, onnxruntime, TensorFlow and Celeritas's
  batch-size regression modes) and ``calibrate-comm``;
* ``fuse/``: the ``fuse`` pass and its algorithms (CPD-TOPO, Moirai's rules, Pesto's acyclic batch
  merging, colocation) and the ``topo-order`` analysis pass;
* ``place/``: the ``place`` pass, the placement problem every placer receives, and one module per
  placer (Baechi, Celeritas, FastT, HEFT, Expert, METIS, the ILP);
* ``transform/``: graph rewrites (FastT operation splitting, the data-parallel replication);
* the small passes at the top level: ``schedule``, ``simulate``, ``critical-path``, ``dce``,
  ``strip-annotations``, ``verify-acyclic``.

``profile`` is imported first: it is the first registered provider of ``cost`` and ``mem``, so the
pass manager runs it (analytical mode) when a pipeline needs costs that are missing.
"""

from graphir.passes import profile  # isort: skip  (first provider of cost/mem)
from graphir.passes import (
    compare,
    critical_path,
    dce,
    fuse,
    parallelize,
    place,
    schedule,
    simulate,
    strip_annotations,
    verify_acyclic,
)
from graphir.passes.fuse import kernels as fuse_kernels
from graphir.passes.fuse import topo_order
from graphir.passes.place import baechi, celeritas, expert, fastt, heft, ilp, metis, os_dpos, pipeline
from graphir.passes.profile import calibrate_comm
from graphir.passes.profile import tf as profile_tf
from graphir.passes.transform import data_parallel, merge_constants, microbatch, split

__all__ = [
    "baechi",
    "calibrate_comm",
    "celeritas",
    "compare",
    "critical_path",
    "data_parallel",
    "dce",
    "expert",
    "fastt",
    "fuse",
    "fuse_kernels",
    "heft",
    "ilp",
    "metis",
    "merge_constants",
    "microbatch",
    "os_dpos",
    "parallelize",
    "pipeline",
    "place",
    "profile",
    "profile_tf",
    "schedule",
    "simulate",
    "split",
    "strip_annotations",
    "topo_order",
    "verify_acyclic",
]
