"""``python -m graphir.driver.check``: prove lowerings on logical CPU devices (one JSON line per model).

The command line of :mod:`graphir.backends.tf.check` (its docstring describes the checks and the
JSON fields). It lives in the driver because it runs pass pipelines (``--passes``, loaded with
:func:`graphir.driver.load_builtin_passes`) on clusters such as ``4xcpu`` (resolved by
:mod:`graphir.driver.clusters`), which the backends below the passes cannot name. TensorFlow's
logical devices are configured first, before its runtime starts.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from graphir.backends.tf import check
from graphir.driver.builtin import load_builtin_passes
from graphir.driver.clusters import resolve_file_or_host  # noqa: F401  (--cluster=4xcpu, FILE.toml)
from graphir.errors import GraphIRError
from graphir.runguard import IO_FLAG, allowing_io_ops


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see :mod:`graphir.backends.tf.check`)."""
    parser = argparse.ArgumentParser(
        prog="python -m graphir.driver.check", description=(check.__doc__ or "").splitlines()[0]
    )
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument(
        "--train", action="store_true", help="the models are TF training-step GraphDefs: compare one step"
    )
    parser.add_argument("--int-high", type=int, default=2, help="--train: integer inputs lie in [0, N)")
    parser.add_argument("--cluster", default="4xcpu")
    parser.add_argument("--passes", default="profile,fuse{algo=cpd-topo},place{algo=adjusting}")
    parser.add_argument("--devices", type=int, default=4, help="logical CPU devices to create")
    parser.add_argument(
        "--enforce-order",
        action="store_true",
        default=None,
        help="control dependencies along each device's order (--train default: when the placement recorded"
        " the enforced order)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        IO_FLAG,
        action="store_true",
        help="run models whose ops reach outside the process (custom ONNX domains; refused by default)",
    )
    args = parser.parse_args(argv)
    check.configure_logical_cpus(args.devices)
    load_builtin_passes()
    status = 0
    for model in args.models:
        try:
            with allowing_io_ops(args.allow_io_ops):
                if args.train:
                    result = check.check_training_step(
                        model, args.cluster, args.passes, args.devices, args.seed, args.int_high, args.enforce_order
                    )
                else:
                    enforce = bool(args.enforce_order)
                    result = check.check_onnx_model(model, args.cluster, args.passes, enforce, args.devices, args.seed)
        except GraphIRError as exc:
            result = {"model": model.name, "error": exc.one_line()}
            status = 1
        print(json.dumps(result), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
