r"""``--emit=report``: the summary table, and with ``-o`` a JSON report, a timeline and a DOT graph.

The emitted text is the human table (:mod:`graphir.backends.report.table`): makespan, per-device
busy time, utilisation, persistent and peak memory against capacity, bytes moved per link, OOM
devices. Every number comes from one run of the simulator (:func:`graphir.simulator.simulate`), so
the module must be placed and ordered (a pipeline ending in ``place`` or ``simulate``).

With ``-o PATH`` the table goes to ``PATH`` and the side files go next to it, named from ``PATH``
without its suffix (``BASE``); with ``-o DIR`` (an existing directory) ``BASE`` is ``DIR/report``
and the table goes to ``DIR/report.txt``:

* ``BASE.json``: the report as JSON (:func:`~graphir.backends.report.table.report_json`);
* ``BASE.timeline.png`` and ``BASE.timeline.svg``: the Gantt chart
  (:mod:`graphir.backends.report.timeline`, matplotlib, imported only here);
* ``BASE.dot``: the quotient graph coloured by device (:mod:`graphir.backends.report.dot`).

Example::

    graphir-opt model.onnx --cluster=celeritas \\
        --passes='profile,fuse{algo=cpd-topo},place{algo=adjusting},simulate' --emit=report -o out/run.txt

Each side file is written atomically (temporary file, then rename); the driver writes the table
last, so a run that fails while drawing leaves no table behind. Without ``-o`` only the table is
printed. With ``--split-input-file`` every chunk writes the same side files (the last chunk's stay);
report one module per run when the pictures matter.
"""

from __future__ import annotations

import json
from pathlib import Path

from graphir.backends.report.data import Report, build_report
from graphir.backends.report.dot import quotient_dot
from graphir.backends.report.table import format_table, report_json
from graphir.emit import register_emitter
from graphir.errors import BackendError
from graphir.fileio import write_atomically
from graphir.ir import Module

__all__ = ["Report", "build_report", "emit_report", "format_table", "quotient_dot", "report_json", "report_paths"]

SIDE_SUFFIXES = {"json": ".json", "png": ".timeline.png", "svg": ".timeline.svg", "dot": ".dot"}
"""Side file of each kind: ``BASE`` + suffix."""


def report_paths(output: Path) -> dict[str, Path]:
    """The files ``-o output`` produces: ``text`` and the side files ``json``, ``png``, ``svg``, ``dot``.

    Raises:
        BackendError: ``output`` would collide with a side file (it ends in ``.json``, ``.dot``...).
    """
    if output.is_dir():
        base, text = output / "report", output / "report.txt"
    else:
        if output.suffix in {".json", ".dot", ".png", ".svg"}:
            raise BackendError(
                f"--emit=report: -o '{output}' would clash with the report's side files; "
                "give the table's file (e.g. report.txt) or a directory"
            )
        base, text = output.with_suffix("") if output.suffix else output, output
    paths = {"text": text}
    paths.update({kind: base.with_name(base.name + suffix) for kind, suffix in SIDE_SUFFIXES.items()})
    return paths


def write_report_files(report: Report, paths: dict[str, Path]) -> None:
    """Write the JSON report, the timeline PNG and SVG, and the DOT graph to ``paths``."""
    from graphir.backends.report.timeline import render_timeline

    text = json.dumps(report_json(report), indent=1, allow_nan=False) + "\n"
    write_atomically(paths["json"], text, BackendError)
    write_atomically(paths["dot"], quotient_dot(report.module), BackendError)
    for fmt, data in render_timeline(report, ("png", "svg")).items():
        write_atomically(paths[fmt], data, BackendError)


@register_emitter(
    "report",
    "summary table (makespan, busy, memory, links, OOM); with -o also JSON, timeline PNG/SVG and DOT",
    writes_files=True,
)
def emit_report(module: Module, output: Path | None = None) -> str:
    """The table text; with ``output`` also the side files (see the module docstring)."""
    paths = report_paths(output) if output is not None else None
    report = build_report(module)
    if paths is not None:
        write_report_files(report, paths)
    return format_table(report)
