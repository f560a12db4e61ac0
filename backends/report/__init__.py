r"""``--emit=report``: the summary table; with ``-o`` a JSON report, timelines, a DOT graph and an HTML page.

The emitted text is the human table (:mod:`graphir.backends.report.table`): makespan, per-device
busy time, utilisation, persistent and peak memory against capacity, bytes moved per link, OOM
devices. Every number comes from one run of the simulator (:func:`graphir.simulator.simulate`), so
the module must be placed and ordered (a pipeline ending in ``place`` or ``simulate``). The run uses
the congestion rule and execution order of the pipeline's last ``simulate`` pass
(:func:`~graphir.backends.report.data.simulate_rules`), so the report's makespan is the pass's
``makespan-s``; without such a pass, the simulator's defaults.

With ``-o PAGE.html`` the emitted text is the HTML page itself
(:mod:`graphir.backends.report.html`: summary tables, inline SVG timeline, memory bars, pipeline
statistics; one self-contained file) and nothing else is written. With any other ``-o PATH`` the
table goes to ``PATH`` and the side files go next to it, named from ``PATH`` without its suffix
(``BASE``); with ``-o DIR`` (an existing directory) ``BASE`` is ``DIR/report`` and the table goes
to ``DIR/report.txt``:

* ``BASE.json``: the report as JSON (:func:`~graphir.backends.report.table.report_json`);
* ``BASE.timeline.png`` and ``BASE.timeline.svg``: the Gantt chart
  (:mod:`graphir.backends.report.timeline`, matplotlib: the ``report`` extra, imported only here;
  without it ``-o`` stops with a one-line error naming ``pip install 'graphir[report]'``);
* ``BASE.dot``: the quotient graph coloured by device (:mod:`graphir.backends.report.dot`);
* ``BASE.html``: the HTML page.

Example::

    graphir-opt model.onnx --cluster=celeritas \\
        --passes='profile,fuse{algo=cpd-topo},place{algo=adjusting},simulate' --emit=report -o out/

The page names the pipeline and shows the fusion and placement statistics when ``graphir-opt``
made it (the driver publishes them in :data:`graphir.emit.CURRENT_RUN`). Each side file is written
atomically (temporary file, then rename); the driver writes the table last, so a run that fails
while drawing leaves no table behind. Without ``-o`` only the table is printed. With
``--split-input-file`` (more than one chunk) each chunk keeps its own side files, named
``BASE-chunkN`` + suffix for chunk ``N`` (from 0), while the tables of all chunks go to the one text
file; ``-o PAGE.html`` takes a single module (an HTML page cannot hold several).
"""

from __future__ import annotations

import json
from pathlib import Path

from graphir.backends.report.data import Report, build_report, simulate_rules
from graphir.backends.report.dot import quotient_dot
from graphir.backends.report.html import render_html
from graphir.backends.report.table import format_table, report_json
from graphir.emit import CURRENT_RUN, PipelineRun, register_emitter
from graphir.errors import BackendError
from graphir.extras import require
from graphir.fileio import write_atomically
from graphir.ir import Module

__all__ = [
    "Report",
    "build_report",
    "simulate_rules",
    "emit_report",
    "format_table",
    "quotient_dot",
    "render_html",
    "report_json",
    "report_paths",
]

SIDE_SUFFIXES = {"json": ".json", "png": ".timeline.png", "svg": ".timeline.svg", "dot": ".dot", "html": ".html"}
"""Side file of each kind: ``BASE`` + suffix."""


def report_paths(output: Path, chunk: int | None = None) -> dict[str, Path]:
    """The files ``-o output`` produces: ``text`` and the side files ``json``, ``png``, ``svg``, ``dot``, ``html``.

    For ``-o PAGE.html`` only ``{"html": output}``: the page is the emitted text.

    Args:
        output: the ``-o`` path.
        chunk: the ``--split-input-file`` chunk being reported, or ``None``; side files of chunk
            ``N`` are named ``BASE-chunkN`` + suffix.

    Raises:
        BackendError: ``output`` would collide with a side file (it ends in ``.json``, ``.dot``...),
            or names an HTML page for one chunk of several.
    """
    if output.is_dir():
        base, text = output / "report", output / "report.txt"
    elif output.suffix == ".html":
        if chunk is not None:
            raise BackendError(
                f"--emit=report: -o '{output}' holds one page, but --split-input-file gives several modules; "
                "give a directory"
            )
        return {"html": output}
    else:
        if output.suffix in {".json", ".dot", ".png", ".svg"}:
            raise BackendError(
                f"--emit=report: -o '{output}' would clash with the report's side files; "
                "give the table's file (e.g. report.txt) or a directory"
            )
        base, text = output.with_suffix("") if output.suffix else output, output
    if chunk is not None:
        base = base.with_name(f"{base.name}-chunk{chunk}")
    paths = {"text": text}
    paths.update({kind: base.with_name(base.name + suffix) for kind, suffix in SIDE_SUFFIXES.items()})
    return paths


def write_report_files(report: Report, paths: dict[str, Path], run: PipelineRun | None = None) -> None:
    """Write the JSON report, the timeline PNG and SVG, the DOT graph and the HTML page to ``paths``."""
    from graphir.backends.report.timeline import TIMELINE_FEATURE, render_timeline

    # Fail before the first side file is written when the pictures cannot be drawn.
    require("matplotlib", "report", TIMELINE_FEATURE)
    text = json.dumps(report_json(report), indent=1, allow_nan=False) + "\n"
    write_atomically(paths["json"], text, BackendError)
    write_atomically(paths["dot"], quotient_dot(report.module), BackendError)
    for fmt, data in render_timeline(report, ("png", "svg")).items():
        write_atomically(paths[fmt], data, BackendError)
    write_atomically(paths["html"], render_html(report, run), BackendError)


@register_emitter(
    "report",
    "summary table (makespan, busy, memory, links, OOM); with -o also JSON, timeline PNG/SVG, DOT and an HTML page "
    "(-o PAGE.html: the page alone)",
    writes_files=True,
)
def emit_report(module: Module, output: Path | None = None) -> str:
    """The table text; with ``output`` also the side files, or the HTML page for ``-o PAGE.html``.

    See the module docstring for the files.
    """
    run = CURRENT_RUN.get()
    paths = report_paths(output, run.chunk if run is not None else None) if output is not None else None
    report = build_report(module, *simulate_rules(run))
    if paths is not None and "text" not in paths:
        return render_html(report, run)
    if paths is not None:
        write_report_files(report, paths, run)
    return format_table(report)
