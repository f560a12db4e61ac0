"""``--emit=report`` as an HTML page: parsed with ``html.parser`` and checked against the simulator."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest

from graphir.backends.report import build_report, emit_report, render_html, report_paths
from graphir.backends.report.gantt_svg import LABEL_WIDTH, plot_width, tick_step
from graphir.backends.report.html import MEMORY_SCALE_CAP, memory_scale
from graphir.driver import run
from graphir.emit import CURRENT_RUN, PipelineRun
from graphir.parser import parse_module
from graphir.simulator import simulate

# The graph worked by hand in tests/filecheck/emit/report.gir (makespan 6.51 ms; busy 3 ms / 3.5 ms;
# peaks 1 GiB + 12004000 B / 12008000 B; 2 transfers of 12004000 B on gpu0->gpu1): one source for
# the golden test and these tests.
HAND = (Path(__file__).resolve().parents[1] / "filecheck" / "emit" / "report.gir").read_text()


def _with_persistent(gib: int) -> str:
    """HAND with ``gib`` GiB of weights on gpu0 (16 GiB V100s): 17 is just over, 40 far over capacity."""
    return HAND.replace("persistent = 1GiB", f"persistent = {gib}GiB")


VOID = {"meta", "br", "hr", "img", "input", "link", "col", "area", "base", "wbr", "source"}


@dataclass
class Element:
    """One parsed element: tag, attributes, children and its own text."""

    tag: str
    attrs: dict[str, str]
    children: list[Element] = field(default_factory=list)
    text: str = ""

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def walk(self):
        yield self
        for child in self.children:
            yield from child.walk()

    def find_all(self, tag: str, cls: str | None = None, **attrs: str) -> list[Element]:
        return [
            e
            for e in self.walk()
            if e.tag == tag
            and (cls is None or cls in e.classes)
            and all(e.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())
        ]

    def find(self, tag: str, cls: str | None = None, **attrs: str) -> Element:
        (found,) = self.find_all(tag, cls, **attrs)
        return found

    def all_text(self) -> str:
        return self.text + "".join(child.all_text() for child in self.children)


class TreeBuilder(HTMLParser):
    """A strict little DOM: every non-void element must be closed by its own end tag."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self.stack = [self.root]
        self.doctype = ""

    def handle_decl(self, decl: str) -> None:
        self.doctype = decl

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(element)
        if tag not in VOID:
            self.stack.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Element(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        assert self.stack[-1].tag == tag, f"</{tag}> closes <{self.stack[-1].tag}>"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.stack[-1].text += data


def parse_html(text: str) -> Element:
    builder = TreeBuilder()
    builder.feed(text)
    builder.close()
    assert builder.stack == [builder.root], "unclosed elements: " + ", ".join(e.tag for e in builder.stack[1:])
    assert builder.doctype.lower() == "doctype html"
    return builder.root


def _width(element: Element) -> float:
    match = re.fullmatch(r"width:([0-9.]+)%", element.attrs["style"])
    assert match, element.attrs["style"]
    return float(match.group(1))


def test_tables_carry_the_simulators_numbers():
    module = parse_module(HAND)
    sim = simulate(module)
    page = parse_html(render_html(build_report(module)))
    summary = page.find("table", id="summary")
    makespan = summary.find("tr", data_key="makespan").find("td")
    assert float(makespan.attrs["data-value"]) == sim.makespan
    assert makespan.all_text() == "6.510 ms"
    assert summary.find("tr", data_key="transfers").find("td").attrs["data-value"] == "2"
    assert summary.find("tr", data_key="bytes-moved").find("td").attrs["data-value"] == "12004000"
    devices = page.find("table", id="devices")
    rows = [r for r in devices.find_all("tr") if "data-device" in r.attrs]
    assert [r.attrs["data-device"] for r in rows] == ["gpu0", "gpu1"]
    # Columns: device, kind, nodes, busy, util, persistent, peak mem, capacity, mem use.
    cells = [[td.attrs.get("data-value") for td in r.find_all("td")] for r in rows]
    assert [float(c[3]) for c in cells] == sim.busy.tolist()
    assert [int(c[6]) for c in cells] == sim.peak_memory.tolist()
    assert [int(c[2]) for c in cells] == [2, 2]
    (link,) = [r for r in page.find("table", id="links").find_all("tr") if "data-src" in r.attrs]
    assert (link.attrs["data-src"], link.attrs["data-dst"]) == ("gpu0", "gpu1")
    assert float(link.find_all("td")[3].attrs["data-value"]) == sim.link_busy[("gpu0", "gpu1")]
    assert "gpu0" not in page.find("tr", data_key="oom").all_text()


def test_one_memory_bar_per_device_proportional_to_peak_over_capacity():
    module = parse_module(HAND)
    sim = simulate(module)
    page = parse_html(render_html(build_report(module)))
    rows = page.find("section", id="memory").find_all("div", cls="mem-row")
    assert [r.attrs["data-device"] for r in rows] == list(sim.device_names)
    assert memory_scale(build_report(module)) == 1.0  # nobody is over capacity: the track is 100 %
    for row, peak, persistent, capacity in zip(
        rows, sim.peak_memory.tolist(), sim.persistent.tolist(), sim.memory_limit.tolist(), strict=True
    ):
        assert (int(row.attrs["data-peak"]), int(row.attrs["data-capacity"])) == (peak, capacity)
        bar = row.find("div", cls="mem-bar")
        assert _width(bar) == pytest.approx(100 * peak / capacity, abs=1e-4)
        # The bar splits into persistent bytes and the activations live at the peak.
        assert _width(bar.find("div", cls="mem-persistent")) == pytest.approx(100 * persistent / peak, abs=1e-4)
        assert "oom" not in row.classes
    assert _width(rows[0].find("div", cls="mem-bar")) > 5 * _width(rows[1].find("div", cls="mem-bar"))


def test_oom_device_is_red_and_the_track_stretches_past_capacity():
    module = parse_module(_with_persistent(17))
    report = build_report(module)
    page = parse_html(render_html(report))
    gpu0, gpu1 = page.find("section", id="memory").find_all("div", cls="mem-row")
    assert "oom" in gpu0.classes and "oom" not in gpu1.classes
    assert "OOM" in gpu0.find("span", cls="mem-label").all_text()
    assert "OOM" not in gpu1.all_text()
    scale = memory_scale(report)
    use = [row.peak_memory / row.memory_limit for row in report.devices]
    assert scale == pytest.approx(use[0]) and scale > 1.0
    # Both bars keep the same width per unit of use; the 100 % line sits inside the track.
    widths = [_width(row.find("div", cls="mem-bar")) for row in (gpu0, gpu1)]
    assert widths[0] == pytest.approx(100.0, abs=1e-4)
    assert widths[1] == pytest.approx(100 * use[1] / scale, abs=1e-4)
    line = gpu0.find("div", cls="mem-capacity").attrs["style"]
    assert float(re.fullmatch(r"left:([0-9.]+)%", line).group(1)) == pytest.approx(100 / scale, abs=1e-4)
    assert "oom" in page.find("table", id="devices").find("tr", data_device="gpu0").classes
    assert "gpu0" in page.find("tr", data_key="oom").all_text()


def test_far_over_capacity_is_clipped_and_marked():
    report = build_report(parse_module(_with_persistent(40)))
    page = parse_html(render_html(report))
    gpu0, gpu1 = page.find("section", id="memory").find_all("div", cls="mem-row")
    assert memory_scale(report) == MEMORY_SCALE_CAP
    assert _width(gpu0.find("div", cls="mem-bar")) == pytest.approx(100.0)
    assert gpu0.find_all("span", cls="mem-clipped") and not gpu1.find_all("span", cls="mem-clipped")
    use1 = report.devices[1].peak_memory / report.devices[1].memory_limit
    assert _width(gpu1.find("div", cls="mem-bar")) == pytest.approx(100 * use1 / MEMORY_SCALE_CAP, abs=1e-4)


def test_timeline_is_inline_svg_with_one_rect_per_node_at_its_simulated_times():
    module = parse_module(HAND)
    report = build_report(module)
    page = parse_html(render_html(report))
    svg = page.find("section", id="timeline").find("svg", cls="gantt")
    rects = svg.find_all("rect", cls="node")
    assert sorted(r.attrs["data-node"] for r in rects) == ["a", "b", "c", "d"]
    by_name = {r.attrs["data-node"]: r for r in rects}
    scale = plot_width() / report.makespan
    for u, node in enumerate(report.index.nodes):
        rect = by_name[node.name]
        start, finish = float(report.sim.start[u]), float(report.sim.finish[u])
        assert float(rect.attrs["x"]) == pytest.approx(LABEL_WIDTH + start * scale, abs=0.006)
        assert float(rect.attrs["width"]) == pytest.approx((finish - start) * scale, abs=0.011)
        assert node.name in rect.find("title").all_text()
    # gpu0's bars sit on the first row, gpu1's on the second; transfers on the link row below.
    assert float(by_name["a"].attrs["y"]) == float(by_name["b"].attrs["y"]) < float(by_name["c"].attrs["y"])
    transfers = svg.find_all("rect", cls="transfer")
    assert [t.attrs["data-value"] for t in transfers] == ["a", "b"]
    assert min(float(t.attrs["y"]) for t in transfers) > float(by_name["c"].attrs["y"])
    labels = [t.all_text() for t in svg.find_all("text", cls="row-label")]
    assert labels == ["gpu0", "gpu1", "gpu0 \u2192 gpu1"]
    # Wide bars carry their node's name; the legend names the op types and the transfers.
    assert {t.all_text() for t in svg.find_all("text", cls="bar-label")} >= {"a", "c"}
    legend = page.find("div", cls="legend").all_text()
    assert all(op in legend for op in ("hand.Expand", "hand.Reduce", "onnx.Add", "transfer"))
    ticks = [t.all_text() for t in svg.find_all("text", cls="tick")]
    assert ticks == ["0", "1", "2", "3", "4", "5", "6"]


def test_tick_steps_are_round():
    assert tick_step(6.51) == 1
    assert tick_step(2.0) == 0.5
    assert tick_step(625.433) == 100
    assert tick_step(0.03) == pytest.approx(0.005)


def test_page_is_self_contained():
    text = render_html(build_report(parse_module(_with_persistent(17))))
    page = parse_html(text)
    for element in page.walk():
        assert element.tag not in {"script", "link", "img", "iframe", "object", "embed"}, element.tag
        assert not {"src", "href", "xlink:href"} & set(element.attrs), element
    assert "http" not in text and "url(" not in text
    assert page.find("style").text.strip()


def test_page_names_the_pipeline_and_shows_fusion_and_placement_stats(tmp_path, repo_root):
    page_path = tmp_path / "sq.html"
    argv = [
        str(repo_root / "examples/squeezenet.onnx"),
        "--cluster=celeritas",
        "--passes=fuse{algo=cpd-topo},place{algo=m-etf},simulate",
        "--emit=report",
        "-o",
        str(page_path),
    ]
    assert run(argv) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["sq.html"]  # -o PAGE.html: the page alone
    text = page_path.read_text()
    page = parse_html(text)
    assert "place{algo=m-etf}" in page.find("p", cls="pipeline").all_text()
    passes = page.find("table", id="passes")
    rows = passes.find_all("tr")[1:]
    assert [r.find_all("code")[0].all_text() for r in rows] == ["profile", "fuse", "place{algo=m-etf}", "simulate"]
    assert "auto" in rows[0].all_text() and "auto" not in rows[1].all_text()  # profile was inserted
    assert "nodes-before" in rows[1].all_text() and "coarse-nodes" in rows[2].all_text()
    assert "wall" not in text  # place's wall-clock time would make the page differ run to run
    assert "module @squeezenet" not in text and "@squeezenet" in page.find("h1").all_text()


def test_output_modes(tmp_path, capsys):
    gir = tmp_path / "hand.gir"
    gir.write_text(HAND)
    out = tmp_path / "out"
    # `-o DIR/` creates the directory and puts the page next to the other side files.
    assert run([str(gir), "--passes=simulate", "--emit=report", "-o", f"{out}/"]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        "report.dot",
        "report.html",
        "report.json",
        "report.timeline.png",
        "report.timeline.svg",
        "report.txt",
    ]
    page = parse_html((out / "report.html").read_text())
    assert page.find("p", cls="pipeline").all_text() == "pipeline: simulate"
    # -o run.txt: the page is run.html.
    assert run([str(gir), "--emit=report", "-o", str(tmp_path / "run.txt")]) == 0
    assert (tmp_path / "run.html").read_text().startswith("<!DOCTYPE html>")
    assert report_paths(tmp_path / "x.html") == {"html": tmp_path / "x.html"}
    # Without -o: the text table on stdout, no HTML.
    capsys.readouterr()
    assert run([str(gir), "--emit=report"]) == 0
    stdout = capsys.readouterr().out
    assert stdout.startswith("report: module @handmade") and "<html" not in stdout


def test_emit_report_from_python_renders_without_a_pipeline(tmp_path):
    module = parse_module(HAND)
    text = emit_report(module, tmp_path / "p.html")
    assert "Pipeline not known" in text and not (tmp_path / "p.html").exists()  # the driver writes it
    token = CURRENT_RUN.set(PipelineRun((("simulate", False, {"makespan-s": 1.0}),)))
    try:
        assert "No pass ran" not in emit_report(module, tmp_path / "p.html")
    finally:
        CURRENT_RUN.reset(token)
    assert "No pass ran" in render_html(build_report(module), PipelineRun(()))


def test_page_is_byte_identical_across_processes(tmp_path):
    gir = tmp_path / "hand.gir"
    gir.write_text(_with_persistent(17))
    pages = []
    for k in range(2):
        out = tmp_path / f"p{k}.html"
        argv = [str(gir), "--passes=simulate", "--emit=report", "-o", str(out)]
        code = f"from graphir.driver import run; raise SystemExit(run({argv!r}))"
        subprocess.run([sys.executable, "-c", code], check=True)
        pages.append(out.read_bytes())
    assert pages[0] == pages[1]
    assert pages[0] == render_html(build_report(parse_module(_with_persistent(17))), _simulate_run()).encode()


def _simulate_run() -> PipelineRun:
    """What the driver records for ``--passes=simulate`` on the OOM variant of HAND."""
    from graphir.driver import load_builtin_passes
    from graphir.pass_infra import PassContext

    module = parse_module(_with_persistent(17))
    result = load_builtin_passes()["simulate"]().run(module, PassContext())
    return PipelineRun((("simulate", False, dict(result.stats)),))


def test_names_are_escaped():
    module = parse_module(HAND)
    module.name = "x<y>&z"
    page = render_html(build_report(module))
    assert "x&lt;y&gt;&amp;z" in page and "x<y>" not in page
    parse_html(page)


def test_split_input_file_keeps_one_set_of_side_files_per_chunk(tmp_path, capsys):
    gir = tmp_path / "two.gir"
    gir.write_text(HAND + "// -----\n" + _with_persistent(17).replace("@handmade", "@second"))
    out = tmp_path / "out"
    assert run([str(gir), "--split-input-file", "--emit=report", "-o", f"{out}/"]) == 0
    for k, name in enumerate(("handmade", "second")):
        for suffix in ("json", "dot", "html", "timeline.png", "timeline.svg"):
            assert (out / f"report-chunk{k}.{suffix}").is_file(), (k, suffix)
        page = parse_html((out / f"report-chunk{k}.html").read_text())
        assert f"@{name}" in page.find("h1").all_text()
    assert not (out / "report.html").exists()
    tables = (out / "report.txt").read_text()
    assert "module @handmade" in tables and "module @second" in tables
    # One page cannot hold two modules: a one-line error per chunk, no file.
    capsys.readouterr()
    assert run([str(gir), "--split-input-file", "--emit=report", "-o", str(tmp_path / "p.html")]) == 1
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 2 and all("holds one page" in line and "error:" in line for line in errors)
    assert not (tmp_path / "p.html").exists()
