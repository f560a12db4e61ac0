"""The fuzzing harness (devtools/fuzz.py): classification, mutators, and a short seeded slice (< 30 s)."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from devtools import fuzz

ANSWER = {"status": 0, "stderr": "", "escaped": "", "survived": False, "output_hash": "x"}


def test_classify_separates_ok_error_crash_and_hang() -> None:
    assert fuzz.classify(ANSWER).outcome == "ok"
    clean = dict(ANSWER, status=1, stderr="m.gir:3:5: error: unknown op 'x'\n  line\n  ^\n", survived=True)
    assert fuzz.classify(clean).outcome == "error"
    clobbered = dict(clean, survived=False)
    assert fuzz.classify(clobbered).key == "clobbered-output"
    internal = dict(
        ANSWER,
        status=2,
        stderr='Traceback (most recent call last):\n  File "/x/graphir/index.py", line 3, in build\n'
        "OverflowError: too big\nerror: internal error in the importer: OverflowError: too big\n",
    )
    assert fuzz.classify(internal).key == "internal:OverflowError@index.py:build"
    escaped = dict(
        ANSWER, status=None, escaped='Traceback:\n  File "/x/graphir/topo.py", line 9, in walk\nKeyError: 3\n'
    )
    assert fuzz.classify(escaped).key == "escaped:KeyError@topo.py:walk"
    assert fuzz.classify("hang").outcome == "hang"
    assert fuzz.classify("memory").outcome == "hang"
    assert fuzz.classify("died:9").outcome == "crash"
    unformatted = dict(ANSWER, status=1, stderr="something went wrong\n", survived=True)
    assert fuzz.classify(unformatted).outcome == "crash"


def test_mutators_are_deterministic_for_a_seed() -> None:
    seeds = fuzz.gir_seeds()
    assert len(seeds) > 20

    def stream(seed: int) -> list[bytes]:
        rng = random.Random(seed)
        return [fuzz.mutate_gir(rng.choice(seeds), rng, seeds) for _ in range(50)]

    assert stream(5) == stream(5)
    assert stream(5) != stream(6)
    onnx_seeds = fuzz.onnx_seeds()
    rng_a, rng_b = random.Random(1), random.Random(1)
    assert [fuzz.mutate_onnx(onnx_seeds[0], rng_a, onnx_seeds) for _ in range(20)] == [
        fuzz.mutate_onnx(onnx_seeds[0], rng_b, onnx_seeds) for _ in range(20)
    ]


def test_minimise_keeps_the_failure_and_drops_the_rest() -> None:
    text = b"keep\n" + b"".join(b"noise %d\n" % k for k in range(20)) + b"BOOM here\n"
    job = fuzz.Job("gir", text, ())
    small = fuzz.minimise(job, lambda candidate: b"BOOM" in candidate.data)
    assert b"BOOM" in small.data and len(small.data) <= len(b"BOOM")


def test_worker_reports_a_crash_and_a_hang(tmp_path: Path) -> None:
    plugin = tmp_path / "fuzz_bad_plugin.py"
    plugin.write_text(
        "import dataclasses, time\n"
        "from typing import ClassVar\n"
        "from graphir.pass_infra import Pass, register_pass\n\n"
        "@register_pass\n@dataclasses.dataclass(frozen=True)\n"
        "class Boom(Pass):\n"
        '    """Crash."""\n'
        '    name: ClassVar[str] = "fuzz-boom"\n'
        "    def run(self, module, ctx):\n"
        "        raise ZeroDivisionError('boom')\n\n"
        "@register_pass\n@dataclasses.dataclass(frozen=True)\n"
        "class Sleep(Pass):\n"
        '    """Hang."""\n'
        '    name: ClassVar[str] = "fuzz-sleep"\n'
        "    def run(self, module, ctx):\n"
        "        while True:\n"
        "            pass\n"
    )
    source = (fuzz.REPO_ROOT / "examples" / "mlp.gir").read_bytes()
    worker = fuzz.Worker(timeout=15, memory_mb=3072)
    try:
        crash = fuzz.classify(worker.run(fuzz.Job("gir", source, (f"--load-plugin={plugin}", "--passes=fuzz-boom"))))
        assert crash.outcome == "crash" and crash.key.startswith("internal:ZeroDivisionError@")
        worker.timeout = 3
        started = time.monotonic()
        hang = fuzz.classify(worker.run(fuzz.Job("gir", source, (f"--load-plugin={plugin}", "--passes=fuzz-sleep"))))
        assert hang.outcome == "hang" and time.monotonic() - started < 120  # CPU-limited: 3 s of CPU
        worker.timeout = 15
        again = fuzz.classify(worker.run(fuzz.Job("gir", source, ("--emit=summary",))))  # a fresh worker
        assert again.outcome == "ok"
    finally:
        worker.close()


@pytest.mark.parametrize(
    ("seed", "seconds", "least"), [(19, 15, 75), pytest.param(19, 40, 200, marks=pytest.mark.slow)]
)
def test_short_seeded_fuzz_slice_finds_no_crash(seed: int, seconds: int, least: int) -> None:
    """The slice `make test` runs: about a hundred mutated `.gir` and ONNX inputs in 15 s (the slow
    suite: a few hundred in 40 s), none a crash."""
    campaign = fuzz.run_campaign({"gir": 10, "onnx": 2}, seed, seconds=seconds, runs=1500, save=False)
    found = {key: outcome.line for key, (_, outcome) in campaign.crashes.items()}
    assert found == {}
    total = sum(sum(counts.values()) for counts in campaign.counts.values())
    assert total >= least


def test_a_file_written_outside_the_output_path_is_a_stray_outcome() -> None:
    stray = dict(ANSWER, status=0, stray=["/tmp/graphir-fuzz-canary/stray.txt"])
    outcome = fuzz.classify(stray)
    assert outcome.outcome == "stray" and "stray.txt" in outcome.key
    refused = dict(ANSWER, status=1, stderr="w.pb:node 'WriteFile': error: --run-tf refused: ...\n", survived=True)
    assert fuzz.classify(refused).outcome == "error"


def test_run_path_slice_refuses_io_seeds_and_writes_no_stray_file() -> None:
    """A short seeded slice of the run paths (models executed on 2 logical CPUs): no crash, hang or stray file.

    The seeds that write, read, list or print into files or call Python are refused in one line;
    with ``--allow-io-ops`` the worker sees the file they write (the stray check works).
    """
    campaign = fuzz.run_campaign({"graphdef-run": 1, "onnx-run": 1}, 5, seconds=40, runs=24, save=False)
    assert campaign.crashes == {}
    assert sum(sum(counts.values()) for counts in campaign.counts.values()) >= 10
    seeds = fuzz.SEEDS["graphdef-run"]()
    writer = seeds[3]  # writes stray.txt into the working directory
    worker = fuzz.Worker(timeout=60, memory_mb=3072)
    try:
        refused = fuzz.classify(worker.run(fuzz.Job("graphdef-run", writer, fuzz.GRAPHDEF_RUN_PIPELINES[1])))
        assert refused.outcome == "error" and "--allow-io-ops" in refused.line
        allowed = fuzz.classify(
            worker.run(fuzz.Job("graphdef-run", writer, (*fuzz.GRAPHDEF_RUN_PIPELINES[1], "--allow-io-ops")))
        )
        assert allowed.outcome == "stray" and allowed.line.endswith("/cwd/stray.txt")
    finally:
        worker.close()
