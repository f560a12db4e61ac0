"""The ONNX backend node suite through the TensorFlow lowering (``devtools/tf_onnx_cases.py --suite node``).

A fixed, seeded slice of the suite runs here (the whole suite runs in ``make bench`` and writes
``benchmarks/results/tf_onnx_node.md``): every case of the slice must get the status the committed
table records for it, and none may crash the runner. ``make test`` runs a slice of 60 cases, the
slow suite (``make test-all``) one of 240. The comparison helpers are checked on
hand-made outputs.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from devtools import child_env
from devtools.tf_onnx_cases import (
    NODE_TARGET,
    compare_outputs,
    merge_node_records,
    node_sample,
    parse_node_table,
    render_node_table,
)

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "tf_onnx_node.md"
SLICE, SEED = 240, 20
FAST_SLICE = 60
_ROW = re.compile(r"^\| (test_\w+) \| [^|]* \| (\d+) \| (.*) \|$")


def _table() -> dict[str, str]:
    """Case -> status, from the committed table."""
    rows = {}
    for line in RESULTS.read_text().splitlines():
        match = _ROW.match(line)
        if match:
            rows[match.group(1)] = match.group(3).split(":")[0]
    return rows


def test_committed_table_meets_the_target():
    text = RESULTS.read_text()
    totals = re.search(r"^\| (\d+) \| (\d+) \| (\d+) \| ([\d.]+) % \| (\d+) \|$", text, re.MULTILINE)
    assert totals is not None
    cases, plain, passed, share, multi = (float(g) for g in totals.groups())
    assert cases == len(_table()) >= 1800
    assert passed / plain == pytest.approx(share / 100, abs=1e-3)
    assert share / 100 >= NODE_TARGET, f"{share} % of the plain-tensor cases pass"
    assert multi > 0  # some cases were placed over several devices
    failures = [case for case, status in _table().items() if status in ("crash", "timeout", "runner error")]
    assert failures == []


@pytest.mark.parametrize("size", [FAST_SLICE, pytest.param(SLICE, marks=pytest.mark.slow)])
def test_seeded_slice_matches_the_table(tmp_path, size):
    table = _table()
    names = node_sample(sorted(table), size, SEED)
    assert names == node_sample(sorted(table), size, SEED) and len(names) == size
    env = child_env(TF_CPP_MIN_LOG_LEVEL="3", GRAPHIR_MEASURE_CPU="0", GRAPHIR_CACHE_DIR=str(tmp_path))
    command = [sys.executable, "-m", "devtools.tf_onnx_cases", "--suite", "node", "--json"]
    command += ["--only", ",".join(names)]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600, check=False)
    records = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [r["case"] for r in records] == names
    differ = [
        f"{r['case']}: {r['status']} {r['detail']} (table: {table[r['case']]})"
        for r in records
        if r["status"] != table[r["case"]]
    ]
    assert differ == [], "regenerate benchmarks/results/tf_onnx_node.md (make bench)"
    assert sum(r["status"] == "pass" for r in records) >= size // 2
    assert result.returncode == 0, result.stderr[-2000:]


def test_compare_outputs_follows_the_backend_runner():
    a = np.array([1.0, 2.0, np.nan], np.float32)
    assert compare_outputs([a], [a.copy()], 1e-3, 1e-7) is None  # NaN equals NaN
    assert compare_outputs([a * (1 + 5e-4)], [a], 1e-3, 1e-7) is None
    assert "outside rtol" in compare_outputs([a * 1.01], [a], 1e-3, 1e-7)
    assert "dtype" in compare_outputs([a.astype(np.float64)], [a], 1e-3, 1e-7)
    assert "shape" in compare_outputs([a[:2]], [a], 1e-3, 1e-7)
    ints = np.array([1000, 2000], np.int64)
    assert "exact" in compare_outputs([ints + [0, 1]], [ints], 1e-3, 1e-7)  # 5e-4 relative, but integers are exact
    strings = np.array(["a", "b"], dtype=object)
    assert compare_outputs([np.array([b"a", b"b"], dtype=object)], [strings], 1e-3, 1e-7) is None
    assert "strings" in compare_outputs([np.array([b"a", b"c"], dtype=object)], [strings], 1e-3, 1e-7)
    assert "outputs" in compare_outputs([a, a], [a], 1e-3, 1e-7)


def test_node_sample_is_seeded_and_sorted():
    names = [f"test_{k:03d}" for k in range(100)]
    first = node_sample(names, 10, 3)
    assert first == sorted(first) and len(set(first)) == 10
    assert first == node_sample(list(reversed(names)), 10, 3)
    assert first != node_sample(names, 10, 4)
    assert node_sample(names, 500, 3) == names


def test_table_lists_reasons():
    records = [
        {"case": "test_a", "ops": ["Abs"], "devices": 2, "plain": True, "status": "pass", "detail": ""},
        {
            "case": "test_b",
            "ops": ["Foo"],
            "devices": 0,
            "plain": True,
            "status": "unsupported op Foo",
            "detail": "Foo",
        },
        {
            "case": "test_c",
            "ops": ["SequenceAt"],
            "devices": 0,
            "plain": False,
            "status": "not plain tensors",
            "detail": "input #0 is a sequence",
        },
    ]
    text = render_node_table(records, "cmd")
    assert "| 3 | 2 | 1 | 50.0 % | 1 |" in text
    assert "| test_b | Foo | 0 | unsupported op Foo: Foo |" in text
    assert "| test_c | SequenceAt | 0 | not plain tensors: input #0 is a sequence |" in text


def test_committed_table_parses_back_to_its_own_text():
    text = RESULTS.read_text()
    command, merged, records = parse_node_table(text)
    assert command.startswith("python -m devtools.tf_onnx_cases --suite node")
    assert render_node_table(records, command, merged) == text


def test_merge_replaces_rerun_rows_and_recomputes_totals():
    old = [
        {"case": "test_a", "ops": ["Abs"], "devices": 1, "plain": True, "status": "pass", "detail": ""},
        {
            "case": "test_b",
            "ops": ["LSTM"],
            "devices": 0,
            "plain": True,
            "status": "unsupported op LSTM",
            "detail": "LSTM",
        },
    ]
    new = [{"case": "test_b", "ops": ["LSTM"], "devices": 2, "plain": True, "status": "pass", "detail": ""}]
    records = merge_node_records(old, new)
    text = render_node_table(records, "cmd", ["test_b"])
    assert "| 2 | 2 | 2 | 100.0 % | 1 |" in text
    assert "Rows re-run after that run with `--merge`: `test_b`." in text
    assert parse_node_table(text) == ("cmd", ["test_b"], [{**r, "suite": "node"} for r in records])
