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

    python -m devtools.tf_onnx_cases                       # print the table
    python -m devtools.tf_onnx_cases -o benchmarks/results/tf_onnx_cases.md
    python -m devtools.tf_onnx_cases --json --only test_PReLU_1d,test_operator_pad

``--json`` prints one JSON object per case instead; the exit status is 1 when the rule is broken.

**The ONNX node suite** (``--suite node``): the ONNX project's own conformance cases, which the
installed ``onnx`` package generates in memory (:func:`onnx.backend.test.case.node.collect_testcases`,
about 1,900 cases, ``*_expanded`` function bodies included). Each case goes through the same
import -> ``profile,place{algo=m-topo}`` on ``4xcpu`` -> lowering -> run on 4 logical CPUs, and its
outputs are compared as the ONNX backend runner compares them: same shape and dtype, then
``np.testing.assert_allclose`` with the case's own ``rtol``/``atol`` for floating-point outputs, and
exact equality for integers, booleans and strings. A case whose data is not plain tensors
(sequences, optionals, 4- and 8-bit floats and ints, which TensorFlow has no kernels for) is listed
with that reason and not run. Cases run in a worker subprocess: a case that aborts TensorFlow or
hangs is recorded (``crash``/``timeout``) and the worker restarts, so no case stops the run::

    python -m devtools.tf_onnx_cases --suite node -o benchmarks/results/tf_onnx_node.md
    python -m devtools.tf_onnx_cases --suite node --sample 300 --seed 0 --json
    python -m devtools.tf_onnx_cases --suite node --only test_argmax_default_axis_example
    python -m devtools.tf_onnx_cases --suite node --only test_lstm_defaults,test_if \
        --merge -o benchmarks/results/tf_onnx_node.md

``--merge`` re-runs only the ``--only`` cases and replaces their rows in the existing ``-o`` table
(totals recomputed; the page says which rows were re-run after the whole-suite run it records).

The node suite's exit status is 1 when a case crashed or timed out, or (on the whole suite) when
fewer than :data:`NODE_TARGET` of the plain-tensor cases pass.
"""

from __future__ import annotations

import argparse
import json
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from devtools import child_env

__all__ = [
    "NODE_TARGET",
    "SUITES",
    "TOLERANCE",
    "case_dirs",
    "compare_outputs",
    "data_problem",
    "node_cases",
    "node_sample",
    "merge_node_records",
    "parse_node_table",
    "render_node_table",
    "render_table",
    "rule_violations",
    "run_case",
    "run_isolated",
    "run_node_case",
]

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
    from graphir.driver import load_builtin_passes
    from graphir.errors import BackendError
    from graphir.importers.onnx import import_onnx
    from graphir.pass_infra import PassContext
    from graphir.pass_manager import PassManager
    from graphir.pipeline import parse_pipeline

    load_builtin_passes()
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
        "Written by `python -m devtools.tf_onnx_cases -o benchmarks/results/tf_onnx_cases.md`.",
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


# --------------------------------------------------------------------------------- the ONNX node suite

NODE_SUITE = "node"
NODE_TARGET = 0.9
"""Share of the plain-tensor node cases that must pass on the whole suite."""

CASE_TIMEOUT = 180.0
"""Seconds one case may take in the worker before it is recorded as ``timeout``."""

_LOW_PRECISION = ("float8", "float4", "int4", "uint4", "int2", "uint2")
"""numpy dtype name prefixes (ml_dtypes) of the 2-, 4- and 8-bit formats: TensorFlow has the dtypes
but no kernels for them, so such cases are listed as not plain tensors."""

_NODE_CASES: dict[str, Any] = {}


def node_cases(only: Sequence[str] = ()) -> list[Any]:
    """The node suite's ``TestCase`` objects, generated by the installed onnx package, sorted by name.

    Generating them takes a few seconds (the onnx package computes every expected output with its
    reference implementation); the result is cached for the process.
    """
    if not _NODE_CASES:
        from onnx.backend.test.case.node import collect_testcases

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the generators' own overflow/divide warnings
            with np.errstate(all="ignore"):
                cases = collect_testcases(None)
        _NODE_CASES.update((case.name, case) for case in sorted(cases, key=lambda c: c.name))
    if only:
        missing = [name for name in only if name not in _NODE_CASES]
        if missing:
            raise KeyError(f"no node case named {', '.join(missing)}")
        return [_NODE_CASES[name] for name in sorted(set(only))]
    return list(_NODE_CASES.values())


def node_sample(names: Sequence[str], count: int, seed: int) -> list[str]:
    """A seeded sample of ``count`` case names (sorted), the same for the same names, count and seed."""
    ordered = sorted(names)
    if count >= len(ordered):
        return ordered
    picks = np.random.default_rng(seed).choice(len(ordered), size=count, replace=False)
    return sorted(ordered[k] for k in picks)


def _as_array(value: Any) -> Any:
    """A data-set value as the backend runner reads it: TensorProto and numpy scalars become arrays."""
    import onnx
    from onnx import numpy_helper

    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, np.generic):
        return np.asarray(value)
    return value


def _data_sets(case: Any) -> list[tuple[list[Any], list[Any]]]:
    return [([_as_array(v) for v in ins], [_as_array(v) for v in outs]) for ins, outs in case.data_sets]


def _describe_value(value: Any) -> str | None:
    """Why a data-set value is not a plain tensor TensorFlow can compute with (``None``: it is one)."""
    if value is None:
        return "an optional without a value"
    if isinstance(value, (list, tuple)):
        return "a sequence"
    if not isinstance(value, np.ndarray):
        return f"a {type(value).__name__}"
    name = value.dtype.name
    if name.startswith(_LOW_PRECISION):
        return f"{name} tensors (TensorFlow has no kernels for this dtype)"
    return None


def data_problem(case: Any) -> str | None:
    """One line saying why ``case`` has data other than plain tensors (``None``: plain tensors only)."""
    for info in (*case.model.graph.input, *case.model.graph.output):
        kind = info.type.WhichOneof("value")
        if kind != "tensor_type":
            return f"'{info.name}' is {kind.replace('_type', '')}-typed, not a plain tensor" if kind else None
    for inputs, outputs in _data_sets(case):
        for role, values in (("input", inputs), ("output", outputs)):
            for k, value in enumerate(values):
                reason = _describe_value(value)
                if reason is not None:
                    return f"{role} #{k} is {reason}"
    return None


def compare_outputs(actual: Sequence[np.ndarray], expected: Sequence[Any], rtol: float, atol: float) -> str | None:
    """The ONNX backend runner's check: a one-line mismatch (``None``: the outputs agree).

    Shapes and dtypes must be equal; floating-point outputs must satisfy
    ``np.testing.assert_allclose(actual, expected, rtol, atol)`` (NaN equals NaN; bfloat16 gets two of
    its ULPs of relative tolerance, as in the runner); integers, booleans and strings must be equal.
    """
    if len(actual) != len(expected):
        return f"{len(actual)} outputs, expected {len(expected)}"
    for k, (got, want) in enumerate(zip(actual, expected, strict=True)):
        want = np.asarray(want)
        got = np.asarray(got)
        if got.shape != want.shape:
            return f"output #{k} has shape {list(got.shape)}, expected {list(want.shape)}"
        if want.dtype == object:
            decoded = np.vectorize(lambda v: v.decode() if isinstance(v, bytes) else v, otypes=[object])
            if got.size and not np.array_equal(decoded(got), decoded(want)):
                return f"output #{k} (strings) differs"
            continue
        if got.dtype != want.dtype:
            return f"output #{k} has dtype {got.dtype}, expected {want.dtype}"
        if want.dtype.kind in "biuU":
            if not np.array_equal(got, want):
                wrong = int(np.sum(got != want))
                return f"output #{k}: {wrong} of {want.size} elements differ (exact comparison)"
            continue
        tolerance = rtol
        if want.dtype.name == "bfloat16":
            tolerance = max(rtol, 2**-6)
        got64, want64 = got.astype(np.float64), want.astype(np.float64)
        close = np.isclose(got64, want64, rtol=tolerance, atol=atol, equal_nan=True)
        if not np.all(close):
            error = np.abs(got64 - want64)[~close]
            finite = error[np.isfinite(error)]
            worst = f"max abs error {float(np.max(finite)):.3g}" if finite.size else "inf/nan differ"
            outside = f"{int(np.sum(~close))} of {want.size} elements outside rtol {tolerance:g} atol {atol:g}"
            return f"output #{k}: {outside} ({worst})"
    return None


def _node_ops(case: Any) -> list[str]:
    return sorted(
        {f"{n.domain}.{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type for n in case.model.graph.node}
    )


def run_node_case(case: Any) -> dict[str, Any]:
    """Import, place, lower, run and compare one node-suite case; a JSON-able record like :func:`run_case`'s.

    ``status`` is ``pass``, ``not plain tensors``, ``unsupported op X``, ``import error``,
    ``placement error``, ``lowering error``, ``run error`` or ``numeric mismatch``; ``detail`` says why.
    """
    import onnx

    from graphir.backends.tf.lowering import check_supported, lower
    from graphir.backends.tf.onnx_ops import ONNX_OPS
    from graphir.driver import load_builtin_passes
    from graphir.errors import BackendError
    from graphir.importers.onnx import import_onnx
    from graphir.pass_infra import PassContext
    from graphir.pass_manager import PassManager
    from graphir.pipeline import parse_pipeline

    load_builtin_passes()
    ops = _node_ops(case)
    missing = [op for op in ops if "onnx." + op not in ONNX_OPS]
    record: dict[str, Any] = {"case": case.name, "suite": NODE_SUITE, "ops": ops, "devices": 0, "detail": ""}
    record["supported"] = not missing
    problem = data_problem(case)
    record["plain"] = problem is None
    if problem is not None:
        record.update(status="not plain tensors", detail=problem)
        return record
    with tempfile.TemporaryDirectory(prefix="graphir-node-") as tmp:

        def detail(exc: BaseException) -> str:  # errors name the model file: not its temporary folder
            return _one_line(exc).replace(f"{tmp}/", "")

        path = Path(tmp) / f"{case.name}.onnx"
        onnx.save_model(case.model, str(path))
        try:
            module = import_onnx(path)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a table row
            record.update(status="import error", detail=detail(exc))
            return record
    if missing:
        record.update(status=f"unsupported op {missing[0]}", detail=", ".join(missing))
        return record
    try:
        check_supported(module)
        module.cluster_spec = CLUSTER
        PassManager(parse_pipeline(PIPELINE)).run(module, PassContext(seed=0))
        record["devices"] = len({n.device for n in module.graph.nodes if n.device is not None})
    except Exception as exc:  # noqa: BLE001
        record.update(status="placement error", detail=detail(exc))
        return record
    try:
        lowered = lower(module)
    except Exception as exc:  # noqa: BLE001
        status = "lowering error" if isinstance(exc, BackendError) else "lowering crash"
        record.update(status=status, detail=detail(exc))
        return record
    for inputs, expected in _data_sets(case):
        try:
            actual = lowered(*inputs)
        except Exception as exc:  # noqa: BLE001
            record.update(status="run error", detail=detail(exc))
            return record
        mismatch = compare_outputs(actual, expected, case.rtol, case.atol)
        if mismatch is not None:
            record.update(status="numeric mismatch", detail=mismatch)
            return record
    record.update(status="pass")
    return record


def _worker(names: Sequence[str]) -> None:
    """Run node cases one by one, printing ``start <name>`` before and its JSON record after each."""
    from graphir.backends.tf.check import configure_logical_cpus

    configure_logical_cpus(DEVICES)
    cases = node_cases()
    by_name = {case.name: case for case in cases}
    for name in names:
        print(f"start {name}", flush=True)
        case = by_name.get(name)
        if case is None:
            record = {"case": name, "suite": NODE_SUITE, "ops": [], "devices": 0, "supported": False}
            record.update(plain=False, status="unknown case", detail="not in the installed onnx package")
        else:
            try:
                with warnings.catch_warnings(), np.errstate(all="ignore"):
                    warnings.simplefilter("ignore")
                    record = run_node_case(case)
            except Exception as exc:  # noqa: BLE001 - the runner never stops on a case
                record = {"case": name, "suite": NODE_SUITE, "ops": _node_ops(case), "devices": 0}
                record.update(supported=False, plain=True, status="runner error", detail=_one_line(exc))
        print(json.dumps(record), flush=True)


def _crash_record(name: str, status: str, detail: str) -> dict[str, Any]:
    ops: list[str] = []
    plain = True
    if name in _NODE_CASES:
        ops = _node_ops(_NODE_CASES[name])
        plain = data_problem(_NODE_CASES[name]) is None
    return {
        "case": name,
        "suite": NODE_SUITE,
        "ops": ops,
        "devices": 0,
        "supported": False,
        "plain": plain,
        "status": status,
        "detail": detail,
    }


def _pump(stream: Any, sink: queue.Queue[str | None]) -> None:
    for line in stream:
        sink.put(line)
    sink.put(None)


def run_isolated(names: Sequence[str], case_timeout: float = CASE_TIMEOUT) -> Iterator[dict[str, Any]]:
    """Run node cases ``names`` in a worker subprocess; yields one record per case, in order.

    A case that kills the worker (a TensorFlow abort) is recorded as ``crash`` with the last line of
    the worker's stderr, one that runs longer than ``case_timeout`` seconds as ``timeout``; a new
    worker then takes the remaining cases.
    """
    pending = list(names)
    env = child_env(TF_CPP_MIN_LOG_LEVEL="3", GRAPHIR_MEASURE_CPU="0")
    while pending:
        with tempfile.TemporaryFile("w+") as errors:
            worker = subprocess.Popen(
                [sys.executable, "-m", "devtools.tf_onnx_cases", "--suite", NODE_SUITE, "--worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errors,
                text=True,
                env=env,
            )
            assert worker.stdin is not None and worker.stdout is not None
            worker.stdin.write("\n".join(pending) + "\n")
            worker.stdin.close()
            lines: queue.Queue[str | None] = queue.Queue()
            stdout = worker.stdout

            threading.Thread(target=_pump, args=(stdout, lines), daemon=True).start()
            current: str | None = None
            started = time.monotonic()
            failure: tuple[str, str] | None = None
            while True:
                limit = case_timeout if current is not None else max(case_timeout, 300.0)
                try:
                    line = lines.get(timeout=max(1.0, limit - (time.monotonic() - started)))
                except queue.Empty:
                    worker.kill()
                    failure = ("timeout", f"still running after {limit:.0f} s; the worker was stopped")
                    break
                if line is None:
                    break
                if line.startswith("start "):
                    current, started = line[6:].strip(), time.monotonic()
                elif line.startswith("{"):
                    record = json.loads(line)
                    pending.remove(record["case"])
                    current, started = None, time.monotonic()
                    yield record
            code = worker.wait()
            if not pending:
                return
            if failure is None:
                errors.seek(0)
                tail = [t for t in errors.read().splitlines() if t.strip()]
                last = " ".join((tail[-1] if tail else "").split())[:200]
                failure = ("crash", f"the worker exited with status {code}: {last}")
            victim = current if current is not None else pending[0]
            pending.remove(victim)
            yield _crash_record(victim, *failure)


_RUNNER_FAILURES = ("crash", "timeout", "runner error", "lowering crash")


_TABLE_ROW = re.compile(r"^\| (test_\w+) \| ([^|]*) \| (\d+) \| (.*) \|$")
_MERGED_LINE = "Rows re-run after that run with `--merge`: "


def parse_node_table(text: str) -> tuple[str, list[str], list[dict[str, Any]]]:
    """``(command, merged case names, records)`` of a node table :func:`render_node_table` wrote."""
    command_match = re.search(r"^Written by `(.*)`\.$", text, re.MULTILINE)
    command = command_match.group(1) if command_match else ""
    merged: list[str] = []
    for line in text.splitlines():
        if line.startswith(_MERGED_LINE):
            merged = [n.strip(" `.") for n in line[len(_MERGED_LINE) :].split(",") if n.strip(" `.")]
    records = []
    for line in text.splitlines():
        match = _TABLE_ROW.match(line)
        if match is None:
            continue
        case, ops, devices, result = match.groups()
        status, _, detail = result.replace("\\|", "|").partition(": ")
        record = {"case": case, "suite": NODE_SUITE, "ops": ops.split(), "devices": int(devices)}
        record.update(plain=status != "not plain tensors", status=status, detail=detail)
        records.append(record)
    return command, merged, records


def merge_node_records(old: Sequence[dict[str, Any]], new: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``old`` with every case of ``new`` replaced (cases not in ``old`` appended), in case order."""
    by_case = {r["case"]: r for r in old}
    by_case.update({r["case"]: r for r in new})
    return [by_case[name] for name in sorted(by_case)]


def render_node_table(records: Sequence[dict[str, Any]], command: str, merged: Sequence[str] = ()) -> str:
    """The Markdown report of the node suite: totals, a breakdown by status and op, one row per case.

    ``merged`` names the cases re-run with ``--merge`` after the whole-suite run ``command``.
    """
    from collections import Counter

    plain = [r for r in records if r.get("plain", True)]
    passed = sum(r["status"] == "pass" for r in plain)
    share = 100 * passed / len(plain) if plain else 0.0
    lines = [
        "# ONNX backend node suite through the TensorFlow lowering",
        "",
        f"Written by `{command}`.",
        "Every case of the ONNX backend *node* suite, as the installed `onnx` package generates it",
        "(`onnx.backend.test.case.node.collect_testcases`), is imported, placed on",
        f"`{CLUSTER}` with `{PIPELINE}`, lowered to TensorFlow and run on {DEVICES} logical CPU devices.",
        "Outputs are compared as the ONNX backend runner does: equal shape and dtype, then",
        "`assert_allclose` with the case's own `rtol`/`atol` for floats (exact for integers, booleans, strings).",
        "Cases whose data is not plain tensors (sequences, optionals, 2/4/8-bit formats) are listed, not run.",
    ]
    if merged:
        lines += ["", _MERGED_LINE + ", ".join(f"`{name}`" for name in sorted(merged)) + "."]
    lines += [
        "",
        "| cases | plain tensor data | pass | pass rate (plain) | multi-device runs |",
        "|---:|---:|---:|---:|---:|",
        f"| {len(records)} | {len(plain)} | {passed} | {share:.1f} % | {sum(r['devices'] >= 2 for r in records)} |",
        "",
        "| status | cases |",
        "|---|---:|",
    ]
    statuses = Counter("unsupported op" if r["status"].startswith("unsupported op") else r["status"] for r in records)
    for status, count in sorted(statuses.items(), key=lambda item: (-item[1], item[0])):
        lines.append(f"| {status} | {count} |")
    lines += ["", "| case | ops | devices | result |", "|---|---|---:|---|"]
    for r in records:
        result = r["status"] if r["status"] == "pass" else f"{r['status']}: {r['detail']}"
        result = " ".join(result.split()).replace("|", "\\|")
        lines.append(f"| {r['case']} | {' '.join(r['ops'])} | {r['devices']} | {result} |")
    return "\n".join(lines) + "\n"


def _main_node(args: argparse.Namespace, argv: Sequence[str]) -> int:
    only = [n for n in args.only.split(",") if n]
    if args.worker:
        _worker([line.strip() for line in sys.stdin if line.strip()])
        return 0
    names = only or [case.name for case in node_cases()]
    if args.sample:
        names = node_sample(names, args.sample, args.seed)
    if args.merge and not (only and args.output and args.output.is_file()):
        print("--merge needs --only and an existing -o table", file=sys.stderr)
        return 2
    records = []
    for record in run_isolated(names, args.case_timeout):
        records.append(record)
        if args.json:
            print(json.dumps(record), flush=True)
    command = "python -m devtools.tf_onnx_cases " + " ".join(argv)
    merged: list[str] = []
    if args.merge:
        command, merged, old = parse_node_table(args.output.read_text())
        merged = sorted(set(merged) | {r["case"] for r in records})
        records = merge_node_records(old, records)
    if args.output:
        args.output.write_text(render_node_table(records, command, merged))
    if not args.json:
        sys.stdout.write(render_node_table(records, command, merged))
    failures = [r for r in records if r["status"] in _RUNNER_FAILURES]
    for r in failures:
        print(f"runner failure: {r['case']}: {r['status']} {r['detail']}", file=sys.stderr)
    plain = [r for r in records if r.get("plain", True)]
    whole = (not only or args.merge) and not args.sample
    if whole and plain and sum(r["status"] == "pass" for r in plain) < NODE_TARGET * len(plain):
        print(f"fewer than {NODE_TARGET:.0%} of the plain-tensor cases pass", file=sys.stderr)
        return 1
    return 1 if failures else 0


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m devtools.tf_onnx_cases", description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path, help="write the Markdown table here")
    parser.add_argument("--json", action="store_true", help="print one JSON object per case")
    parser.add_argument("--only", default="", help="comma-separated case names")
    parser.add_argument("--suite", choices=("pytorch", NODE_SUITE), default="pytorch", help="which cases to run")
    parser.add_argument("--sample", type=int, default=0, help="node suite: a seeded sample of this many cases")
    parser.add_argument("--seed", type=int, default=0, help="node suite: the sample's seed")
    parser.add_argument("--case-timeout", type=float, default=CASE_TIMEOUT, help="node suite: seconds per case")
    parser.add_argument("--merge", action="store_true", help="node suite: re-run --only cases into the -o table")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.suite == NODE_SUITE:
        return _main_node(args, sys.argv[1:] if argv is None else argv)
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
