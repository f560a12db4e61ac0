"""The onnx package's bundled PyTorch backend test cases through import, placement, TF lowering and a run.

For every case of ``onnx/backend/test/data/pytorch-converted`` and ``pytorch-operator`` (a
``model.onnx`` plus ``test_data_set_0/input_*.pb`` and ``output_*.pb``): import it with graphir,
place it on ``4xcpu`` with ``profile,place{algo=m-topo}`` (which spreads the larger cases over
several devices), lower it to TensorFlow (:func:`graphir.backends.tf.lower`), run the
``tf.function`` on 4 logical CPU devices and compare every output with the expected one:
``max |tf - expected| / max |expected|`` at most 1e-4, the dtypes equal (float64 cases are computed
and compared in float64).

Each case gets one status: ``pass``, ``unsupported op X`` (an op outside the ONNX->TF table),
``numeric mismatch`` (with the relative error), ``import error``, ``lowering error`` or ``run
error``. **The rule**: every case whose ops are all in the table passes.

Command line (TensorFlow's logical devices are configured first, so run it as its own process)::

    python -m graphir.tools.tf_onnx_cases                       # print the table
    python -m graphir.tools.tf_onnx_cases -o benchmarks/results/tf_onnx_cases.md
    python -m graphir.tools.tf_onnx_cases --json --only test_PReLU_1d,test_operator_pad

``--json`` prints one JSON object per case instead; the exit status is 1 when the rule is broken.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["SUITES", "TOLERANCE", "case_dirs", "render_table", "rule_violations", "run_case"]

SUITES = ("pytorch-converted", "pytorch-operator")
"""The bundled suites, under ``onnx/backend/test/data``."""

TOLERANCE = 1e-4
"""Largest accepted relative error (``max |tf - expected| / max |expected|``)."""

PIPELINE = "profile,place{algo=m-topo}"
CLUSTER = "4xcpu"
DEVICES = 4


def case_dirs(only: Sequence[str] = ()) -> list[Path]:
    """Every case directory of :data:`SUITES` (sorted by suite, then name), optionally only ``only``."""
    import onnx

    root = Path(onnx.__file__).parent / "backend" / "test" / "data"
    cases = [d for suite in SUITES for d in sorted((root / suite).iterdir()) if (d / "model.onnx").is_file()]
    if only:
        wanted = set(only)
        cases = [d for d in cases if d.name in wanted]
    return cases


def _read_tensors(directory: Path, prefix: str) -> list[np.ndarray]:
    import onnx
    from onnx import numpy_helper

    files = sorted(directory.glob(f"{prefix}_*.pb"), key=lambda p: int(p.stem.split("_")[-1]))
    return [numpy_helper.to_array(onnx.load_tensor(str(f))) for f in files]


def _model_ops(path: Path) -> list[str]:
    import onnx

    model = onnx.load_model(str(path), load_external_data=False)
    return sorted({node.op_type for node in model.graph.node})


def _one_line(exc: BaseException) -> str:
    from graphir.errors import GraphIRError

    text = exc.one_line() if isinstance(exc, GraphIRError) else f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())[:200]


def run_case(case: Path) -> dict[str, Any]:
    """Import, place, lower, run and compare one case; a JSON-able record with its ``status``.

    Args:
        case: the case directory (``model.onnx`` and ``test_data_set_0``).

    Returns:
        ``case``, ``suite``, ``ops``, ``supported`` (all ops in the table), ``devices`` (how many
        distinct devices the placement used), ``status`` and ``detail`` (error text or relative error).
    """
    from graphir.backends.tf.check import relative_error
    from graphir.backends.tf.lowering import check_supported, lower
    from graphir.backends.tf.onnx_ops import ONNX_OPS
    from graphir.errors import BackendError
    from graphir.importers.onnx import import_onnx
    from graphir.pass_infra import PassContext
    from graphir.pass_manager import PassManager
    from graphir.pipeline import parse_pipeline

    record: dict[str, Any] = {"case": case.name, "suite": case.parent.name, "devices": 0, "detail": ""}
    ops = _model_ops(case / "model.onnx")
    missing = [op for op in ops if "onnx." + op not in ONNX_OPS]
    record["ops"] = ops
    record["supported"] = not missing
    try:
        module = import_onnx(case / "model.onnx")
    except Exception as exc:  # noqa: BLE001 - every failure becomes a table row
        record.update(status="import error", detail=_one_line(exc))
        return record
    if missing:
        record.update(status=f"unsupported op {missing[0]}", detail=", ".join(missing))
        return record
    try:
        check_supported(module)
        module.cluster_spec = CLUSTER
        PassManager(parse_pipeline(PIPELINE)).run(module, PassContext(seed=0))
        record["devices"] = len({n.device for n in module.graph.nodes if n.device is not None})
        lowered = lower(module)
    except BackendError as exc:
        record.update(status="lowering error", detail=_one_line(exc))
        return record
    except Exception as exc:  # noqa: BLE001
        record.update(status="placement error", detail=_one_line(exc))
        return record
    data = case / "test_data_set_0"
    inputs, expected = _read_tensors(data, "input"), _read_tensors(data, "output")
    try:
        actual = lowered(*inputs)
    except Exception as exc:  # noqa: BLE001
        record.update(status="run error", detail=_one_line(exc))
        return record
    dtypes = [(str(a.dtype), str(e.dtype)) for a, e in zip(actual, expected, strict=False)]
    if len(actual) != len(expected) or any(a != e for a, e in dtypes):
        record.update(status="numeric mismatch", detail=f"outputs/dtypes differ: {dtypes}")
        return record
    error = relative_error(actual, expected)
    record["rel_error"] = error
    if error <= TOLERANCE:
        record.update(status="pass", detail=f"{error:.1e}")
    else:
        record.update(status="numeric mismatch", detail=f"relative error {error:.2e}")
    return record


def rule_violations(records: Sequence[dict[str, Any]]) -> list[str]:
    """Cases whose ops are all in the table but which do not pass (the rule: there are none)."""
    return [f"{r['case']}: {r['status']} {r['detail']}" for r in records if r["supported"] and r["status"] != "pass"]


def render_table(records: Sequence[dict[str, Any]]) -> str:
    """The Markdown report: totals per suite, then one row per case."""
    lines = [
        "# ONNX backend test cases through the TensorFlow lowering",
        "",
        "Written by `python -m graphir.tools.tf_onnx_cases -o benchmarks/results/tf_onnx_cases.md`.",
        f"Each case of the onnx package's `{'` and `'.join(SUITES)}` suites is imported, placed on",
        f"`{CLUSTER}` with `{PIPELINE}`, lowered to TensorFlow and run on {DEVICES} logical CPU devices;",
        f"its outputs must match the expected ones within a relative error of {TOLERANCE:g}",
        "(`max |tf - expected| / max |expected|`, same dtype; float64 cases run in float64).",
        "**Rule**: every case whose ops are all in the ONNX->TF table passes.",
        "",
        "| suite | cases | pass | all ops in table | rule holds |",
        "|---|---:|---:|---:|---|",
    ]
    for suite in (*SUITES, "total"):
        rows = [r for r in records if suite in ("total", r["suite"])]
        passed = sum(r["status"] == "pass" for r in rows)
        supported = sum(r["supported"] for r in rows)
        holds = "yes" if not rule_violations(rows) else "NO"
        share = f" ({100 * passed / len(rows):.1f} %)" if rows else ""
        lines.append(f"| {suite} | {len(rows)} | {passed}{share} | {supported} | {holds} |")
    lines += ["", "| suite | case | ops | devices | result |", "|---|---|---|---:|---|"]
    for r in records:
        result = r["status"] if r["status"] == "pass" else f"{r['status']}: {r['detail']}"
        result = result.replace("|", "\\|")
        lines.append(f"| {r['suite']} | {r['case']} | {' '.join(r['ops'])} | {r['devices']} | {result} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m graphir.tools.tf_onnx_cases", description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path, help="write the Markdown table here")
    parser.add_argument("--json", action="store_true", help="print one JSON object per case")
    parser.add_argument("--only", default="", help="comma-separated case names")
    args = parser.parse_args(argv)
    from graphir.backends.tf.check import configure_logical_cpus

    configure_logical_cpus(DEVICES)
    records = []
    for case in case_dirs([n for n in args.only.split(",") if n]):
        record = run_case(case)
        records.append(record)
        if args.json:
            print(json.dumps(record), flush=True)
    if args.output:
        args.output.write_text(render_table(records))
    if not args.json:
        sys.stdout.write(render_table(records))
    violations = rule_violations(records)
    for line in violations:
        print(f"rule broken: {line}", file=sys.stderr)
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
