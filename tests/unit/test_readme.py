"""The README is executable documentation: its tour runs, its examples match the code, its pass list is current.

* The quick tour (the fenced ``sh`` blocks between ``<!-- tour:begin -->`` and ``<!-- tour:end -->``)
  runs block by block in a scratch directory with ``examples/`` linked in and the venv's ``bin``
  first on PATH; every block must exit 0, every file it names (``-o PATH`` or a ``# writes ...``
  comment) must exist afterwards, and every line of the ``text`` block that follows it must occur
  in its output.
* The pass table and ``docs/passes.md`` equal what :mod:`devtools.passdoc` generates now.
* The cluster TOML shown is ``examples/cluster.toml``, which loads with the documented routes.
* The JSON example equals what ``--emit=json`` produces for the command it names.
* Relative links in README.md and docs/*.md point at files and headings that exist.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest

from devtools import passdoc
from graphir.cluster import load_cluster_toml, resolve_cluster
from graphir.pass_infra import Pass

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
VENV_BIN = Path(sys.executable).parent

FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """``(language, body)`` of every fenced block, in order."""
    return [(match.group(1), match.group(2)) for match in FENCE.finditer(text)]


def between(text: str, begin: str, end: str) -> str:
    assert text.count(begin) == 1 and text.count(end) == 1, f"README.md needs one {begin} and one {end}"
    return text.split(begin)[1].split(end)[0]


def section(text: str, heading: str) -> str:
    """The body of the ``## heading`` section."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert match, f"README.md has no '## {heading}' section"
    return match.group(1)


@dataclasses.dataclass
class TourStep:
    script: str
    expected: list[str]

    def named_files(self) -> list[str]:
        """Files the step promises: ``-o PATH`` arguments and ``# writes A B ...`` comments."""
        joined = self.script.replace("\\\n", " ")
        names: list[str] = []
        for line in joined.splitlines():
            code, _, comment = line.partition("#")
            tokens = shlex.split(code)
            names += [tokens[k + 1] for k, token in enumerate(tokens[:-1]) if token in ("-o", "--output")]
            names += [token.removeprefix("--output=") for token in tokens if token.startswith("--output=")]
            match = re.match(r"\s*writes?:?\s+(.*)", comment)
            if match:
                names += match.group(1).replace(",", " ").split()
        return names


def tour_steps() -> list[TourStep]:
    tour = between(README.read_text(), "<!-- tour:begin -->", "<!-- tour:end -->")
    steps: list[TourStep] = []
    for language, body in fenced_blocks(tour):
        if language == "sh":
            steps.append(TourStep(body, []))
        elif language == "text":
            assert steps, "an output block before any command in the tour"
            steps[-1].expected += [line for line in body.splitlines() if line.strip() and line.strip() != "..."]
    return steps


# --------------------------------------------------------------------------- the tour


def test_tour_is_there():
    steps = tour_steps()
    commands = " ".join(step.script for step in steps)
    assert len(steps) >= 4
    for needle in ("examples/squeezenet.onnx", "--emit=summary", "--timing", "--stats", "--emit=report", "--run-tf"):
        assert needle in commands, needle
    assert "--emit=tf-graphdef" in commands
    assert all(step.named_files() or step.expected for step in steps), "every step shows or writes something"


def test_quick_tour_runs_as_written(tmp_path):
    (tmp_path / "examples").symlink_to(REPO / "examples", target_is_directory=True)
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    for step in tour_steps():
        result = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", step.script],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, f"README tour step failed:\n{step.script}\n{result.stderr[-3000:]}"
        output = result.stdout + result.stderr
        for line in step.expected:
            assert line in output, f"README shows {line!r} for\n{step.script}\nbut the output is:\n{output}"
        for name in step.named_files():
            assert (tmp_path / name).exists(), f"README says {name} is written by\n{step.script}"
    check_report_claims(json.loads((tmp_path / "out" / "report.json").read_text()))


def check_report_claims(report: dict) -> None:
    """Step 3's prose, checked on its ``report.json`` against the celeritas preset's own numbers.

    The README's output block only shows what a run printed (``makespan: 499.854 us``); these are
    the relations that make such a number right, derived from the cluster file, not the simulator:
    each link is busy for its bytes over the PCIe path's 12 GB/s; under ``congestion=topology`` a
    device's one ingress port carries one transfer at a time, held for bytes / bandwidth only, and
    each value lands its path's latency (10 us within a PCIe switch, 21 us across the host bridge)
    after its bytes; a device runs one node at a
    time and is busy for the sum of its nodes' durations; the makespan is the last finish, so it
    is at least gpu0's compute and at least the time its port is held.
    """
    preset = resolve_cluster("celeritas")
    assert preset.topology is not None
    latency = {(path.src, path.dst): path.latency for path in preset.topology.paths}
    bandwidth = 12e9
    assert {path.bandwidth for path in preset.topology.paths} == {bandwidth}
    for link in report["links"]:
        assert link["busy"] == pytest.approx(link["bytes"] / bandwidth, rel=1e-9), link
    by_port: dict[str, list[dict]] = {}
    for transfer in report["transfers"]:
        held = transfer["bytes"] / bandwidth
        flight = latency[(transfer["src"], transfer["dst"])]  # 10 us through one PCIe switch, 21 us via the host
        assert transfer["finish"] - transfer["start"] == pytest.approx(flight + held, rel=1e-9), transfer
        by_port.setdefault(transfer["dst"], []).append(transfer)
    for transfers in by_port.values():
        transfers.sort(key=lambda t: t["start"])
        for first, second in zip(transfers, transfers[1:], strict=False):
            assert second["start"] >= first["start"] + first["bytes"] / bandwidth - 1e-12, (first, second)
    nodes: dict[str, list[tuple[float, float]]] = {}
    for node in report["nodes"]:
        nodes.setdefault(node["device"], []).append((node["start"], node["finish"]))
    for device in report["devices"]:
        spans = sorted(nodes.get(device["name"], []))
        assert device["busy"] == pytest.approx(sum(end - begin for begin, end in spans), rel=1e-9)
        assert all(b[0] >= a[1] - 1e-12 for a, b in zip(spans, spans[1:], strict=False)), device["name"]
    makespan = report["makespan"]
    assert makespan == max(node["finish"] for node in report["nodes"])
    gpu0 = next(device for device in report["devices"] if device["name"] == "gpu0")
    port = sum(t["bytes"] for t in by_port.get("gpu0", [])) / bandwidth
    assert makespan >= gpu0["busy"] and makespan >= port


def test_tour_step_parsing():
    step = TourStep(
        "mkdir -p out\ngraphir-opt m.onnx \\\n    --emit=report -o out/   # writes out/a.txt, out/b.png\n", []
    )
    assert step.named_files() == ["out/", "out/a.txt", "out/b.png"]


# --------------------------------------------------------------------------- two commands


def test_two_commands_are_make_demo_and_make_test():
    blocks = [body for language, body in fenced_blocks(section(README.read_text(), "Two commands")) if language == "sh"]
    assert len(blocks) == 1
    commands = [line.split("#")[0].strip() for line in blocks[0].splitlines() if line.strip()]
    assert commands == ["make demo", "make test"]
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.MULTILINE) and re.search(r"^test:", makefile, re.MULTILINE)


# --------------------------------------------------------------------------- pass reference


def test_pass_reference_is_current():
    stale = passdoc.stale_files(REPO)
    assert not stale, f"{', '.join(str(p.relative_to(REPO)) for p in stale)} out of date: run `{passdoc.WRITE_COMMAND}`"


def test_pass_reference_covers_every_builtin_pass_and_placer():
    from graphir.passes.place import PLACERS

    reference = (REPO / "docs" / "passes.md").read_text()
    readme_table = between(README.read_text(), passdoc.BEGIN_MARKER, passdoc.END_MARKER)
    for doc in passdoc.builtin_passes():
        assert f"## {doc.name}\n" in reference
        assert f"| `{doc.name}` |" in readme_table
        for option in doc.options:
            assert f"| `{option.name}` |" in reference
    for algo in PLACERS:
        assert f"| `{algo}` |" in reference
        assert f"- `{algo}`:" in readme_table
    assert "| `window` | `int` | `200` |" in reference  # fuse's option with its type and default


@dataclasses.dataclass(frozen=True)
class _Documented(Pass):
    """Do nothing in a documented way. Requires: cost.

    Options:
        alpha: first line of help
            continued here.
        beta_gamma: the ``beta`` option.
    """

    name: ClassVar[str] = "documented"
    requires: ClassVar[tuple[str, ...]] = ("cost",)
    alpha: int = 3
    beta_gamma: tuple[str, ...] = ()
    delta: float = dataclasses.field(default=0.5, metadata={"help": "from field metadata"})


@dataclasses.dataclass(frozen=True)
class _Undocumented(Pass):
    """A pass whose option has no help."""

    name: ClassVar[str] = "undocumented"
    secret: int = 1


def test_document_pass_reads_docstring_and_metadata():
    doc = passdoc.document_pass(_Documented)
    assert doc.summary == "Do nothing in a documented way."
    assert doc.requires == ("cost",)
    assert [(o.name, o.type_text, o.default, o.help) for o in doc.options] == [
        ("alpha", "int", "3", "first line of help continued here."),
        ("beta-gamma", "list<str>", '""', "the `beta` option."),
        ("delta", "float", "0.5", "from field metadata"),
    ]


def test_undocumented_option_is_an_error():
    with pytest.raises(passdoc.PassDocError, match="option 'secret' of pass 'undocumented' has no help text"):
        passdoc.document_pass(_Undocumented)


def test_rendered_tables_escape_pipes():
    doc = passdoc.document_pass(_Documented)
    piped = dataclasses.replace(doc.options[0], type_text="a|b", help="x | y")
    text = passdoc.render_reference([dataclasses.replace(doc, options=(piped,))])
    assert "| `alpha` | `a\\|b` | `3` | x \\| y |" in text
    algo = passdoc.AlgorithmDoc("algo-x", "one | two", (piped,), "graphir.passes.x")
    placed = passdoc.render_reference([dataclasses.replace(doc, name="place", selector="algo", algorithms=(algo,))])
    assert "| `algo-x` | one \\| two | `alpha=3` |" in placed
    assert "### place{algo=algo-x}" in placed and "| `alpha` | `a\\|b` | `3` | x \\| y |" in placed


def test_splice_readme_requires_markers():
    with pytest.raises(passdoc.PassDocError, match="exactly one"):
        passdoc.splice_readme("no markers\n", "x\n")
    spliced = passdoc.splice_readme(f"a\n{passdoc.BEGIN_MARKER}\nold\n{passdoc.END_MARKER}\nb\n", "new\n")
    assert spliced == f"a\n{passdoc.BEGIN_MARKER}\nnew\n{passdoc.END_MARKER}\nb\n"


def test_check_reports_stale_files_and_write_fixes_them(tmp_path, capsys):
    (tmp_path / "README.md").write_text(f"# x\n{passdoc.BEGIN_MARKER}\nstale\n{passdoc.END_MARKER}\n")
    assert passdoc.main(["--check", "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("passdoc: error: ") and passdoc.WRITE_COMMAND in err and len(err.splitlines()) == 1
    assert passdoc.main(["--write", "--root", str(tmp_path)]) == 0
    assert passdoc.main(["--check", "--root", str(tmp_path)]) == 0
    assert "| `fuse` |" in (tmp_path / "README.md").read_text()
    assert (tmp_path / "docs" / "passes.md").read_text() == (REPO / "docs" / "passes.md").read_text()


def test_passdoc_without_markers_fails_in_one_line(tmp_path, capsys):
    (tmp_path / "README.md").write_text("# nothing to splice\n")
    assert passdoc.main(["--check", "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("passdoc: error: README.md needs exactly one") and len(err.splitlines()) == 1


# --------------------------------------------------------------------------- cluster and JSON examples


def test_cluster_example_is_the_example_file_and_loads():
    blocks = [
        body for language, body in fenced_blocks(section(README.read_text(), "Cluster files")) if language == "toml"
    ]
    example = REPO / "examples" / "cluster.toml"
    assert blocks == [example.read_text()]
    cluster = load_cluster_toml(example)
    assert cluster.device_names == ("gpu0", "gpu1", "cpu0")
    assert cluster.device("cpu0").tf_device == "/device:CPU:0"
    assert cluster.device("gpu1").tf_device == "/device:GPU:1"
    assert cluster.device("cpu0").memory == 64 << 30
    direct = cluster.link("cpu0", "gpu0")
    assert (direct.latency, direct.bandwidth, direct.route) == (10e-6, 12e9, ())
    routed = cluster.link("cpu0", "gpu1")  # the README's two-hop route: latencies add, narrowest wire bounds
    assert routed.route == ("cpu0", "gpu0", "gpu1")
    assert routed.latency == pytest.approx(15e-6) and routed.bandwidth == 12e9


def test_json_example_matches_the_emitter():
    text = section(README.read_text(), "JSON interchange format")
    blocks = [body for language, body in fenced_blocks(text) if language == "json"]
    assert len(blocks) == 1
    command = re.search(r"`(graphir-opt examples/mlp\.gir [^`]*--emit=json)`", text)
    assert command, "the JSON section names the command that produced its example"
    result = subprocess.run(
        [str(VENV_BIN / "graphir-opt"), *shlex.split(command.group(1))[1:]],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    actual = json.loads(result.stdout)
    assert json.loads(blocks[0]) == actual
    documented = set(re.findall(r"^\| `(\w+)", text, re.MULTILINE))
    assert set(actual) <= documented
    fields = {
        match
        for row in re.findall(r"^\| `nodes\[\]\.([^|]+)\|", text, re.MULTILINE)
        for match in re.findall(r"\w+", row)
    }
    assert set(actual["nodes"][0]) <= fields


# --------------------------------------------------------------------------- links


def _anchors(markdown: str) -> set[str]:
    """GitHub-style heading anchors."""
    out = set()
    for heading in re.findall(r"^#+ (.+)$", markdown, re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


@pytest.mark.parametrize("doc", ["README.md", "docs/passes.md", "docs/custom-pass.md", "examples/README.md"])
def test_relative_links_resolve(doc):
    path = REPO / doc
    text = FENCE.sub("", path.read_text())
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part) if file_part else path
        assert linked.exists(), f"{doc} links to missing {target}"
        if anchor and linked.suffix == ".md":
            assert anchor in _anchors(linked.read_text()), f"{doc} links to missing heading {target}"
