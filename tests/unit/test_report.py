"""``--emit=report`` and ``--emit=placement``: numbers against the simulator, files, determinism."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from graphir.backends.placement import emit_placement
from graphir.backends.report import build_report, emit_report, format_table, report_json, report_paths
from graphir.backends.report.dot import device_colour, quotient_dot
from graphir.driver import load_builtin_emitters, run
from graphir.errors import BackendError
from graphir.parser import parse_module
from graphir.simulator import simulate

# The graph worked by hand in tests/filecheck/emit/report.gir (makespan 6.51 ms; busy 3 ms / 3.5 ms;
# peaks 1 GiB + 12004000 B / 12008000 B; 2 transfers of 12004000 B on gpu0->gpu1): one source for
# the golden test and these tests.
HAND = (Path(__file__).resolve().parents[1] / "filecheck" / "emit" / "report.gir").read_text()

# Two groups on gpu0 and gpu1, and a singleton on gpu0: three quotient nodes.
GROUPED = """
module @grouped {cluster = "4xV100"} {
  graph @g(%x : f32[64]) {
    %a = onnx.Relu(%x) : (f32[64]) -> f32[64] [cost = 1ms, device = "gpu0", group = 1, order = 0]
    %b = onnx.Relu(%a) : (f32[64]) -> f32[64] [cost = 1ms, device = "gpu0", group = 1, order = 1]
    %c = onnx.Relu(%x) : (f32[64]) -> f32[64] [cost = 2ms, device = "gpu1", group = 2, order = 0]
    %d = onnx.Relu(%c) : (f32[64]) -> f32[64] [cost = 2ms, device = "gpu1", group = 2, order = 1]
    %e = onnx.Add(%b, %d) : (f32[64], f32[64]) -> f32[64] [cost = 1ms, device = "gpu0", order = 2]
    return %e
  }
}
"""


def test_report_numbers_match_the_simulator_and_the_hand_computation():
    module = parse_module(HAND)
    report = build_report(module)
    sim = simulate(module)
    assert report.makespan == sim.makespan == pytest.approx(6.51e-3)
    assert [row.busy for row in report.devices] == sim.busy.tolist() == pytest.approx([3e-3, 3.5e-3])
    assert [row.peak_memory for row in report.devices] == sim.peak_memory.tolist() == [(1 << 30) + 12004000, 12008000]
    assert [row.utilisation for row in report.devices] == pytest.approx([3 / 6.51, 3.5 / 6.51])
    assert [row.oom for row in report.devices] == [False, False]
    (link,) = report.links
    assert (link.src, link.dst, link.transfers, link.nbytes) == ("gpu0", "gpu1", 2, 12004000)
    assert link.busy == sim.link_busy[("gpu0", "gpu1")]
    first, second = report.transfers
    assert (first.value, first.start, first.finish) == ("a", pytest.approx(2e-3), pytest.approx(3.01e-3))
    # Queued behind a's copy: under the default congestion=topology only bytes / bandwidth holds the
    # route (a's 12e6 B: 2 .. 3 ms), the 10 us latency is in flight.
    assert second.value == "b" and second.start == pytest.approx(first.start + 12e6 / 12e9)


def test_reconstructed_transfers_sum_to_the_simulators_links(repo_root):
    # The congestion and send-once golden graphs: per-link bytes and busy time agree exactly.
    for name in ("congestion", "send-once", "oom"):
        module = parse_module((repo_root / f"tests/filecheck/simulate/{name}.gir").read_text())
        report = build_report(module)
        sim = report.sim
        assert len(report.transfers) == sim.transfers
        for (src, dst), moved in sim.link_bytes.items():
            on_link = [t for t in report.transfers if (t.src, t.dst) == (src, dst)]
            assert sum(t.nbytes for t in on_link) == moved
            # congestion=topology (the default): a link is busy for bytes / bandwidth; each transfer's
            # record also spans the latency it spends in flight.
            in_flight = module.cluster.link(src, dst).latency * len(on_link)
            held = sum(t.finish - t.start for t in on_link) - in_flight
            assert held == pytest.approx(sim.link_busy[(src, dst)], rel=1e-9)


def test_table_text_shows_the_numbers():
    table = format_table(build_report(parse_module(HAND)))
    assert "makespan:   6.510 ms" in table
    assert re.search(r"gpu0\s+V100\s+2\s+3\.000 ms\s+46\.1%\s+1\.00 GiB\s+1\.01 GiB\s+16\.00 GiB\s+6\.3%", table)
    assert re.search(r"gpu0->gpu1\s+2\s+11\.45 MiB\s+1\.000 ms\s+15\.4%", table)
    assert "OOM:        none" in table


def test_oom_device_is_named(repo_root):
    module = parse_module((repo_root / "tests/filecheck/simulate/oom.gir").read_text())
    report = build_report(module)
    assert [row.name for row in report.devices if row.oom] == ["gpu0"]
    assert report_json(report)["oom"] == ["gpu0"]
    assert "OOM:        gpu0" in format_table(report)


def test_unplaced_module_is_a_one_line_backend_error():
    module = parse_module(re.sub(r'device = "gpu\d", ', "", HAND))
    with pytest.raises(BackendError, match="cannot simulate the module: node 'a' has no 'device'"):
        emit_report(module)
    with pytest.raises(BackendError, match="node 'a' has no device"):
        emit_placement(module)


def test_json_report_is_consistent():
    data = report_json(build_report(parse_module(HAND)))
    json.dumps(data, allow_nan=False)
    assert data["makespan"] == pytest.approx(6.51e-3)
    assert [n["id"] for n in data["nodes"]] == ["a", "b", "c", "d"]
    assert [n["device"] for n in data["nodes"]] == ["gpu0", "gpu0", "gpu1", "gpu1"]
    assert sum(t["bytes"] for t in data["transfers"]) == data["links"][0]["bytes"] == 12004000


def test_report_paths():
    paths = report_paths(Path("out/run.txt"))
    assert paths["text"] == Path("out/run.txt")
    assert paths["json"] == Path("out/run.json")
    assert paths["png"] == Path("out/run.timeline.png")
    assert paths["svg"] == Path("out/run.timeline.svg")
    assert paths["dot"] == Path("out/run.dot")
    assert paths["html"] == Path("out/run.html")
    assert report_paths(Path("out/page.html")) == {"html": Path("out/page.html")}  # the page is the text
    assert report_paths(Path("out/run"))["dot"] == Path("out/run.dot")
    with pytest.raises(BackendError, match="clash"):
        report_paths(Path("out/run.json"))


def test_files_are_written_and_deterministic(tmp_path):
    gir = tmp_path / "hand.gir"
    gir.write_text(HAND)
    outputs = []
    for run_dir in ("one", "two"):
        (tmp_path / run_dir).mkdir()
        assert run([str(gir), "--emit=report", "-o", str(tmp_path / run_dir / "hand.txt")]) == 0
        outputs.append(tmp_path / run_dir)
    for suffix in ("txt", "json", "dot", "timeline.png", "timeline.svg", "html"):
        first, second = (d / f"hand.{suffix}" for d in outputs)
        assert first.stat().st_size > 0, suffix
        if suffix != "timeline.png":
            assert first.read_bytes() == second.read_bytes(), suffix
    assert (outputs[0] / "hand.timeline.png").read_bytes().startswith(b"\x89PNG")
    svg = (outputs[0] / "hand.timeline.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "<dc:date>" not in svg


def test_svg_is_identical_across_processes(tmp_path):
    # Element ids in the SVG come from a hash salted per process unless svg.hashsalt is fixed.
    gir = tmp_path / "hand.gir"
    gir.write_text(HAND)
    svgs = []
    for k in range(2):
        out = tmp_path / f"p{k}"
        out.mkdir()
        argv = [str(gir), "--emit=report", "-o", str(out)]
        code = f"from graphir.driver import run; raise SystemExit(run({argv!r}))"
        subprocess.run([sys.executable, "-c", code], check=True)
        svgs.append((out / "report.timeline.svg").read_bytes())
        assert (out / "report.txt").is_file()  # -o DIR: the table goes to DIR/report.txt
    assert svgs[0] == svgs[1]


def test_dot_has_one_node_per_quotient_node_coloured_by_device():
    module = parse_module(GROUPED)
    dot = quotient_dot(module)
    nodes = re.findall(r"^  q(\d+) \[label=\"([^\"]*)\", fillcolor=\"(#[0-9a-f]+)\"\];$", dot, re.M)
    assert len(nodes) == module.graph.index().quotient().num_groups == 3
    colours = {label.split("\\n")[-1]: colour for _, label, colour in nodes}
    assert colours == {"@gpu0": device_colour(0), "@gpu1": device_colour(1)}
    assert device_colour(0) != device_colour(1)
    assert sum(1 for _, label, _ in nodes if label.startswith("group 1\\n2 nodes")) == 1
    # The cross-device edge is highlighted, the local one is not.
    assert re.search(r"q\d -> q\d \[label=\"256 B\", color=\"#d62728\", penwidth=2\];", dot)
    assert quotient_dot(module) == dot


def test_timeline_draws_device_and_link_rows():
    from graphir.backends.report.timeline import render_timeline

    pictures = render_timeline(build_report(parse_module(HAND)), ("svg",))
    assert set(pictures) == {"svg"}
    # matplotlib writes each text as a comment before its glyphs: row labels, bar labels, legend.
    texts = re.findall(r"<!-- (.*?) -->", pictures["svg"].decode())
    rows = [t for t in texts if t.startswith("gpu")]
    assert rows == ["gpu0", "gpu1", "gpu0\u2192gpu1"]
    assert {"a", "b", "c", "d", "hand.Expand", "hand.Reduce", "onnx.Add", "transfer"} <= set(texts)


def test_matplotlib_is_imported_only_when_drawing():
    code = (
        "import sys; from graphir.driver import load_builtin_emitters; load_builtin_emitters(); "
        "from graphir.parser import parse_module; from graphir.backends.report import emit_report; "
        f"emit_report(parse_module({HAND!r})); print('matplotlib' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert result.stdout.strip() == "False"


def test_emitters_are_registered():
    emitters = load_builtin_emitters()
    assert emitters["report"].writes_files and not emitters["placement"].writes_files
    assert emitters["report"].text_path(Path("x.txt")) == Path("x.txt")


def test_placement_round_trip(tmp_path):
    module = parse_module(HAND)
    text = emit_placement(module)
    assert list(json.loads(text)) == sorted(json.loads(text))
    assert json.loads(text) == {"a": "gpu0", "b": "gpu0", "c": "gpu1", "d": "gpu1"}
    path = tmp_path / "p.json"
    path.write_text(text)
    gir = tmp_path / "hand.gir"
    gir.write_text(HAND)
    out = tmp_path / "out.gir"
    pipeline = f"strip-annotations{{keys=device,order}},place{{algo=file path={path}}},simulate"
    assert run([str(gir), "--passes", pipeline, "-o", str(out)]) == 0
    replaced = parse_module(out.read_text())
    assert emit_placement(replaced) == text
    assert np.isclose(simulate(replaced).makespan, simulate(module).makespan)


@pytest.mark.parametrize(("rules", "makespan"), [("congestion=pair", 4.02e-3), ("congestion=task", 5.02e-3)])
def test_report_simulates_under_the_pipelines_simulate_options(repo_root, capsys, rules, makespan):
    # tests/filecheck/simulate/congestion.gir, worked by hand in its header: two 12 MB tensors
    # gpu0 -> gpu1 (10 us + 1 ms each). Under pair the second queues behind the first's whole
    # 1.01 ms: c runs 3.02 .. 4.02 ms. Under task each transfer also holds both devices' compute:
    # a's copy 1 .. 2.01 ms blocks b until 2.01 ms, b runs 2.01 .. 3.01, its copy 3.01 .. 4.02, c
    # 4.02 .. 5.02 ms. The default rule (topology) gives 4.01 ms: the report used to print that
    # whatever the pipeline's simulate pass said.
    path = repo_root / "tests/filecheck/simulate/congestion.gir"
    assert simulate(parse_module(path.read_text())).makespan == pytest.approx(4.01e-3)
    assert run([str(path), f"--passes=simulate{{{rules}}}", "--emit=report", "--stats"]) == 0
    out, err = capsys.readouterr()
    stat = float(re.search(r"simulate\.makespan-s = (\S+)", err).group(1))
    assert stat == pytest.approx(makespan)
    assert f"makespan:   {makespan * 1e3:.3f} ms" in out
