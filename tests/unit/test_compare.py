"""The placer comparison: the ``compare`` pass, ``--emit=compare`` and ``graphir-opt --compare``.

The model: seven nodes of 3 GiB of weights each (21 GiB) on two 16 GiB V100s, so one device is out
of memory and every memory-aware placer must split the graph.
"""

from __future__ import annotations

import io
import json
import re
from html.parser import HTMLParser

import pytest

from graphir.comparison import METADATA_KEY, Comparison, best_row, read_comparison
from graphir.driver import load_builtin_passes, run
from graphir.errors import GraphIRError
from graphir.parser import parse_module
from graphir.pass_infra import PassContext
from graphir.pass_manager import PassManager
from graphir.pipeline import parse_pipeline
from graphir.printer import print_module
from graphir.simulator import simulate

FORK = """
module @fork {cluster = "2xV100"} {
  graph @g(%x : f32[4]) {
    %a = onnx.Relu(%x) : (f32[4]) -> f32[4] [cost = 1ms, mem = {persistent = 3GiB}]
    %b = onnx.Relu(%a) : (f32[4]) -> f32[4] [cost = 2ms, mem = {persistent = 3GiB}]
    %d = onnx.Relu(%b) : (f32[4]) -> f32[4] [cost = 1ms, mem = {persistent = 3GiB}]
    %g = onnx.Relu(%d) : (f32[4]) -> f32[4] [cost = 3ms, mem = {persistent = 3GiB}]
    %c = onnx.Relu(%a) : (f32[4]) -> f32[4] [cost = 2ms, mem = {persistent = 3GiB}]
    %e = onnx.Relu(%c) : (f32[4]) -> f32[4] [cost = 1ms, mem = {persistent = 3GiB}]
    %f = onnx.Add(%g, %e) : (f32[4], f32[4]) -> f32[4] [cost = 1ms, mem = {persistent = 3GiB}]
    return %f
  }
}
"""
ALGOS = ("single", "m-topo", "m-etf", "heft", "adjusting")
GIB = 1 << 30


def _run(pipeline: str, text: str = FORK):
    load_builtin_passes()
    module = parse_module(text)
    stream = io.StringIO()
    manager = PassManager(parse_pipeline(pipeline))
    manager.run(module, PassContext(log_stream=stream))
    return module, manager, stream.getvalue()


def _placed_alone(algo: str):
    """The module placed by ``place{algo=ALGO}`` alone, and its simulation: what a row must equal."""
    module, _, _ = _run(f"place{{algo={algo}}}")
    return module, simulate(module)


@pytest.fixture(scope="module")
def compared():
    return _run(f"compare{{algos={','.join(ALGOS)}}}")


def test_every_row_equals_the_placer_run_alone(compared):
    module, _, _ = compared
    comparison = read_comparison(module)
    assert comparison is not None
    assert [row.algo for row in comparison.rows] == list(ALGOS)
    assert comparison.devices == ("gpu0", "gpu1") and comparison.capacity == (16 * GIB, 16 * GIB)
    for row in comparison.rows:
        _, sim = _placed_alone(row.algo)
        assert row.makespan == pytest.approx(sim.makespan, rel=1e-12)
        assert row.peak_memory == tuple(int(x) for x in sim.peak_memory)
        assert row.oom_devices == tuple(sim.oom_devices)
        assert row.status == ("oom" if sim.oom_devices else "ok")
        assert row.spec == f"place{{algo={row.algo}}}"
        assert sum(row.nodes) == 7 and row.place_seconds >= 0


def test_one_device_is_out_of_memory_and_the_best_fits(compared):
    module, manager, _ = compared
    comparison = read_comparison(module)
    single = comparison.row("single")
    assert single.status == "oom" and single.oom_devices == ("gpu0",)
    assert single.peak_memory[0] >= 21 * GIB and single.nodes == (7, 0)
    fitting = [row for row in comparison.rows if row.status == "ok"]
    assert fitting, "some placer must fit 21 GiB on two 16 GiB devices"
    best = min(fitting, key=lambda row: row.makespan)
    assert comparison.best == best.algo == best_row(comparison.rows).algo
    stats = manager.records[-1].result.stats
    assert stats["best"] == best.algo and stats["best-makespan-s"] == best.makespan
    assert stats["single.status"] == "oom"


def test_keep_best_writes_the_winning_placement(compared):
    module, _, _ = compared
    comparison = read_comparison(module)
    alone, sim = _placed_alone(comparison.best)
    assert [n.device for n in module.graph.nodes] == [n.device for n in alone.graph.nodes]
    assert [n.order for n in module.graph.nodes] == [n.order for n in alone.graph.nodes]
    assert simulate(module).makespan == pytest.approx(sim.makespan, rel=1e-12)
    assert [n.finish for n in module.graph.nodes] == pytest.approx(sim.finish.tolist())


def test_keep_none_leaves_the_graph_unplaced():
    module, _, _ = _run("compare{algos=single,m-etf keep=none}")
    assert all(node.device is None for node in module.graph.nodes)
    assert read_comparison(module).best == "m-etf"


def test_nothing_fits_leaves_the_module_unplaced():
    module, manager, _ = _run("compare{algos=single}")
    assert read_comparison(module).best == ""
    assert manager.records[-1].result.stats["best"] == ""
    assert all(node.device is None for node in module.graph.nodes)


def test_a_failing_placer_is_recorded_and_the_others_run():
    module, _, progress = _run("compare{algos=file,m-etf}")
    comparison = read_comparison(module)
    failed = comparison.row("file")
    assert failed.status == "failed" and "path=FILE.json" in failed.error and failed.peak_memory == ()
    assert comparison.row("m-etf").status == "ok" and comparison.best == "m-etf"
    assert "compare [1/2] file: failed" in progress


def test_progress_lines_and_default_algos():
    _, _, progress = _run("compare")
    lines = [line for line in progress.splitlines() if re.match(r"compare \[\d+/\d+\] \S+: placed", line)]
    from graphir.passes.compare import DEFAULT_ALGOS

    assert len(lines) == len(DEFAULT_ALGOS)
    assert progress.rstrip().splitlines()[-1].startswith("compare: best ")
    _, _, quiet = _run("compare{algos=single progress=false}")
    assert quiet == ""


@pytest.mark.parametrize(
    ("pipeline", "message"),
    [
        ("compare{algos=single,nope}", "unknown placement algorithm 'nope'"),
        ("compare{algos=heft,heft}", "placement algorithm 'heft' named twice"),
        ("compare{keep=worst}", "expected one of best, none"),
    ],
)
def test_bad_options_are_pipeline_errors(pipeline, message):
    load_builtin_passes()
    with pytest.raises(GraphIRError, match=re.escape(message)):
        parse_pipeline(pipeline)


def test_comparison_survives_print_and_parse(compared):
    module, _, _ = compared
    text = print_module(module)
    again = parse_module(text)
    assert read_comparison(again) == read_comparison(module)
    assert Comparison.from_json(read_comparison(module).to_json()) == read_comparison(module)


def test_malformed_metadata_is_a_user_error():
    module = parse_module(FORK)
    module.metadata[METADATA_KEY] = '{"rows": 3}'
    with pytest.raises(GraphIRError, match="is not a placer comparison"):
        read_comparison(module)


# --------------------------------------------------------------------------- emitter and driver


@pytest.fixture
def fork_file(tmp_path):
    path = tmp_path / "fork.gir"
    path.write_text(FORK)
    return path


def test_compare_flag_prints_the_table(fork_file, capsys):
    assert run([str(fork_file), f"--compare={','.join(ALGOS)}"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0].startswith("placer comparison: @fork on 2xV100 (2 devices: gpu0 16.00 GiB, gpu1 16.00 GiB")
    assert "one device: out of memory (gpu0 needs 21.00 GiB of 16.00 GiB)" in lines
    answer = next(line for line in lines if line.startswith("graphir's answer: "))
    starred = [line for line in lines if line.startswith("*")]
    assert len(starred) == 1 and starred[0].split()[1] in answer
    single = next(line for line in lines if line.split()[:1] == ["single"])
    assert "21.00 GiB!" in single and "OUT OF MEMORY on gpu0" in single
    assert "compare [5/5] adjusting: placed in" in captured.err


def test_compare_flag_appends_to_the_pipeline_and_keeps_other_emitters(fork_file, tmp_path, capsys):
    out = tmp_path / "placed.gir"
    assert run([str(fork_file), "--passes=verify-acyclic", "--compare=single,m-etf", "--emit=gir", "-o", str(out)]) == 0
    placed = parse_module(out.read_text())
    assert read_comparison(placed).best == "m-etf"
    assert all(node.device in ("gpu0", "gpu1") for node in placed.graph.nodes)
    assert run([str(out), "--emit=compare"]) == 0  # the recorded comparison renders without re-running
    assert "graphir's answer: m-etf" in capsys.readouterr().out


def test_emit_compare_without_a_comparison_is_one_line(fork_file, capsys):
    assert run([str(fork_file), "--emit=compare"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "holds no placer comparison" in err


class _Page(HTMLParser):
    """Collects element classes and data attributes of the comparison page."""

    def __init__(self):
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, {k: v or "" for k, v in attrs}))


def test_output_directory_gets_table_json_and_page(fork_file, tmp_path):
    out = tmp_path / "cmp"
    assert run([str(fork_file), f"--compare={','.join(ALGOS)}", "-o", f"{out}/"]) == 0
    table = (out / "compare.txt").read_text()
    data = json.loads((out / "compare.json").read_text())
    assert (
        data["best"] in table and data["one_device"] == "one device: out of memory (gpu0 needs 21.00 GiB of 16.00 GiB)"
    )
    assert [row["algo"] for row in data["rows"]] == list(ALGOS)
    page = _Page()
    page.feed((out / "compare.html").read_text())
    rows = {a["data-algo"]: a for tag, a in page.elements if tag == "tr" and "data-algo" in a}
    assert set(rows) == set(ALGOS)
    assert rows["single"]["class"] == "oom" and rows[data["best"]]["class"] == "best"
    makespan_bars = [a for tag, a in page.elements if tag == "div" and "data-makespan" in a]
    assert len(makespan_bars) == len(ALGOS)
    device_bars = [a for tag, a in page.elements if tag == "div" and "data-capacity" in a]
    assert len(device_bars) == 2 * len(ALGOS)
    red = [a for a in device_bars if "oom" in a["class"].split()]
    expected_red = sum(len(row["oom_devices"]) for row in data["rows"])
    assert len(red) == expected_red >= 1
    assert "<script" not in (out / "compare.html").read_text()


def test_page_alone_with_html_output(fork_file, tmp_path):
    page = tmp_path / "page.html"
    assert run([str(fork_file), "--compare=single,m-etf", "-o", str(page)]) == 0
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and 'id="comparison"' in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fork.gir", "page.html"]
