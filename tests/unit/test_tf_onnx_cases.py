"""The onnx package's PyTorch backend test cases through the TensorFlow lowering (``devtools/tf_onnx_cases.py``).

The rule of the committed table: every case whose ops are all in the ONNX->TF op table passes
(import, ``profile,place{algo=m-topo}`` on ``4xcpu``, lowering, a run on 4 logical CPU devices,
outputs within 1e-4 relative). TensorFlow's logical devices are configured per process, so the
tool runs in a subprocess. ``make test`` runs a fixed slice of the cases (``FAST_CASES``, one of them
placed over 3 devices) and checks their rows against the committed table; the whole suite against
the whole table is a slow test (``make test-all``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from devtools import child_env
from devtools.tf_onnx_cases import case_dirs, render_table, rule_violations

FAST_CASES = [
    "test_ConvTranspose2d",
    "test_MaxPool2d_stride_padding_dilation",
    "test_PReLU_2d",
    "test_Conv3d_dilated_strided",
    "test_operator_pad",
    "test_operator_index",
    "test_operator_symbolic_override_nested",
]
RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "tf_onnx_cases.md"


def _run(tmp_path: Path, *extra: str) -> tuple[int, list[dict]]:
    env = child_env(TF_CPP_MIN_LOG_LEVEL="3", GRAPHIR_MEASURE_CPU="0", GRAPHIR_CACHE_DIR=str(tmp_path))
    command = [sys.executable, "-m", "devtools.tf_onnx_cases", "--json", *extra]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600, check=False)
    records = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return result.returncode, records


def test_fast_cases_pass(tmp_path):
    assert all(name in {d.name for d in case_dirs()} for name in FAST_CASES)
    code, records = _run(tmp_path, "--only", ",".join(FAST_CASES))
    assert [r["case"] for r in records] == sorted(FAST_CASES, key=[d.name for d in case_dirs()].index)
    assert rule_violations(records) == []
    assert all(r["status"] == "pass" and r["supported"] for r in records), records
    assert code == 0
    assert max(r["devices"] for r in records) >= 3  # the placement spreads the larger cases
    committed = RESULTS.read_text().splitlines()
    rows = render_table(records).splitlines()[-len(records) :]
    assert [row for row in rows if row not in committed] == [], "regenerate benchmarks/results/tf_onnx_cases.md"


@pytest.mark.slow
def test_every_case_follows_the_rule_and_matches_the_table(tmp_path):
    code, records = _run(tmp_path)
    assert len(records) == len(case_dirs()) >= 100
    assert rule_violations(records) == []
    assert code == 0
    assert max(r["devices"] for r in records) >= 3  # the placement spreads the larger cases
    assert render_table(records) == RESULTS.read_text(), "regenerate benchmarks/results/tf_onnx_cases.md"


def test_unsupported_case_is_reported_not_a_rule_break():
    record = {"case": "c", "suite": "s", "ops": ["Foo"], "supported": False, "status": "unsupported op Foo"}
    record["detail"], record["devices"] = "Foo", 0
    assert rule_violations([record]) == []
    assert "unsupported op Foo: Foo" in render_table([record])
