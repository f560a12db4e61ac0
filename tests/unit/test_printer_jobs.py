"""The printer's forked jobs (``graphir-opt --jobs``): the same bytes as one process, whatever happens."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from devtools.synth import make_synthetic_module
from graphir import printer
from graphir.printer import PRINT_JOBS, print_jobs, print_module

REPO = Path(__file__).resolve().parents[2]
OPT = Path(sys.executable).parent / "graphir-opt"


def _text(module, jobs: int) -> str:
    token = PRINT_JOBS.set(jobs)
    try:
        return print_module(module)
    finally:
        PRINT_JOBS.reset(token)


@pytest.fixture
def small_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fork for graphs of 200 nodes or more (the real threshold is 20,000)."""
    monkeypatch.setattr(printer, "PARALLEL_MIN_NODES", 200)


@pytest.mark.parametrize("jobs", [2, 3, 5])
def test_forked_jobs_print_the_same_bytes(small_threshold: None, jobs: int) -> None:
    module = make_synthetic_module(1000, seed=3)
    serial = _text(module, 1)
    forked = _text(module, jobs)
    assert forked == serial
    assert serial.count("\n") > 1000  # every node line is there


def test_print_jobs_chooses(small_threshold: None, monkeypatch: pytest.MonkeyPatch) -> None:
    token = PRINT_JOBS.set(4)
    try:
        assert print_jobs(199) == 1  # below the threshold: never forked
        assert print_jobs(400) == 4
        assert print_jobs(250) == 2  # at least half the threshold's nodes per job
        monkeypatch.setattr(printer.threading, "active_count", lambda: 2)
        assert print_jobs(400) == 1  # another thread runs: no fork
    finally:
        PRINT_JOBS.reset(token)


def test_automatic_jobs_stop_above_the_largest_graph_a_fork_pays_for(small_threshold, monkeypatch) -> None:
    # Automatic (0) on two cores: two jobs from the threshold up to AUTO_MAX_NODES, one above it;
    # an explicit count is obeyed above it.
    monkeypatch.setattr(printer, "AUTO_MAX_NODES", 1000)
    monkeypatch.setattr(printer, "available_cores", lambda: [0, 1])
    assert [print_jobs(n) for n in (199, 200, 1000, 1001)] == [1, 2, 2, 1]
    token = PRINT_JOBS.set(2)
    try:
        assert print_jobs(1001) == 2
    finally:
        PRINT_JOBS.reset(token)


def test_a_failing_child_has_its_slice_printed_here(small_threshold: None, monkeypatch: pytest.MonkeyPatch) -> None:
    module = make_synthetic_module(600, seed=5)
    nodes = module.graph.index().nodes
    parent = os.getpid()
    forked: list[int] = []

    def line(node) -> str:  # fails in every child
        if os.getpid() != parent:
            raise RuntimeError("child failure")
        return node.name + "\n"

    real_fork = os.fork

    def counting_fork() -> int:
        pid = real_fork()
        if pid:
            forked.append(pid)
        return pid

    monkeypatch.setattr(printer.os, "fork", counting_fork)
    out = io.StringIO()
    printer._write_lines_forked(nodes, 3, line, out)
    assert len(forked) == 2
    assert out.getvalue() == "".join(node.name + "\n" for node in nodes)


def test_graphir_opt_jobs_option(tmp_path: Path) -> None:
    """``--jobs 1`` and ``--jobs 2`` write the same file for a graph above the threshold; a bad count is refused."""
    source = tmp_path / "s.gir"
    source.write_text(print_module(make_synthetic_module(20_500, seed=1)))
    outputs = []
    for jobs in ("1", "2"):
        out = tmp_path / f"out{jobs}.gir"
        done = subprocess.run(
            [str(OPT), str(source), "--jobs", jobs, "-o", str(out)],
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        assert done.returncode == 0, done.stderr
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1] == source.read_bytes()
    bad = subprocess.run([str(OPT), str(source), "--jobs", "two"], capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 1 and "invalid job count 'two'" in bad.stderr


def test_a_fork_that_fails_prints_the_slice_here(small_threshold: None, monkeypatch: pytest.MonkeyPatch) -> None:
    module = make_synthetic_module(600, seed=6)
    serial = _text(module, 1)

    def no_fork() -> int:
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(printer.os, "fork", no_fork)
    assert _text(module, 3) == serial
