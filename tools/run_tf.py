"""Run a placed model on TensorFlow and report the measured step time next to the simulated makespan.

Examples::

    python tools/run_tf.py examples/squeezenet.onnx --cluster=4xcpu --steps=10
    graphir-opt model.onnx --cluster=4xcpu --passes='profile,place{algo=m-topo}' --run-tf=10 -o /dev/null

Builds seeded random inputs (and seeded random variable values for a training graph: the importer
keeps none), lowers the module with every op on its device, runs warm-up then timed steps in a
TensorFlow session and prints ``run-tf: median step ... ; simulated makespan ...`` (``--json``: one
JSON object). A cluster of ``Nxcpu`` (or a TOML file with ``/device:CPU:k`` devices) runs on N
logical CPU devices of this process, configured before TensorFlow initialises (the first thing
done; this tool therefore runs TensorFlow only after the pipeline, and a pipeline that already
initialised TensorFlow with fewer devices is a one-line error). A cluster whose devices are
``/job:worker/task:k/device:CPU:0`` runs on local ``tf.distribute.Server`` processes, one per task
(see :mod:`graphir.backends.tf.distributed`). Exit status 0, or 1 with a one-line error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from graphir.backends.tf import run_report
from graphir.errors import GraphIRError

__all__ = ["main", "run_report"]


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="run_tf", description=__doc__.splitlines()[0])
    parser.add_argument("model", help="model file (.onnx, .pb, .gir) or zoo:<entry>")
    parser.add_argument("--cluster", default="4xcpu", help="cluster shorthand or TOML file (default 4xcpu)")
    parser.add_argument("--passes", default="profile,place{algo=m-topo},simulate", help="pipeline run first")
    parser.add_argument("--steps", type=int, default=10, help="timed steps (default 10)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first (default 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the line")
    parser.add_argument(
        "--allow-io-ops",
        action="store_true",
        help="run a model whose ops reach outside the process (files, network, Python; refused by default)",
    )
    parser.add_argument("--timeout", type=float, default=None, help="time limit of the run in seconds (default 600)")
    args = parser.parse_args(argv)
    from graphir.backends.tf.run import run_module
    from graphir.driver import load_builtin_passes
    from graphir.driver.clusters import resolve_cluster
    from graphir.importers import load_module
    from graphir.pass_infra import PassContext
    from graphir.pass_manager import PassManager
    from graphir.pipeline import parse_pipeline
    from graphir.runguard import allowing_io_ops

    load_builtin_passes()
    try:
        with allowing_io_ops(args.allow_io_ops):
            module = load_module(args.model)
            module.set_cluster(resolve_cluster(args.cluster))
            PassManager(parse_pipeline(args.passes)).run(module, PassContext(seed=args.seed))
            report = run_module(module, args.steps, warmup=args.warmup, seed=args.seed, timeout_s=args.timeout)
    except GraphIRError as exc:
        print(exc.one_line(), file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"model": args.model, "cluster": args.cluster, **vars(report)}))
    else:
        print(report.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
