"""The timeline (Gantt chart) of a simulated schedule, drawn with matplotlib.

One row per device (its compute, one bar per node from ``start`` to ``finish``) and one row per
channel that moved data (one bar per transfer, reconstructed in
:mod:`graphir.backends.report.data`). Compute bars are coloured by op type: the
:data:`MAX_OP_COLOURS` op types with the most busy time get their own colour (a fixed palette, so
colours do not depend on the matplotlib version), the rest share "other". A micro-batched graph's
bars are coloured by micro-batch instead (:func:`bar_keys`), so a pipeline's schedule shows. Graphs of at most
:data:`MAX_LABELLED_NODES` nodes get their node names written on the bars.

matplotlib (the ``report`` extra, :func:`graphir.extras.require`) is imported only here and only
when a picture is drawn, with the Agg canvas (no GUI, no global pyplot state). Output is
deterministic: the figure size depends only on the number of rows, the SVG carries no date and a
fixed ``svg.hashsalt`` for its element ids, and the PNG carries no software tag.
"""

from __future__ import annotations

import io
from collections import defaultdict
from typing import Any

from graphir.backends.report.data import Report
from graphir.copies import MICROBATCHES_METADATA, copy_of
from graphir.extras import require

PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#e15759",
    "#76b7b2",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#86bcb6",
    "#d37295",
)
"""Colours of the op types with the most busy time (Tableau 10 plus one)."""
OTHER_COLOUR = "#bab0ac"
TRANSFER_COLOUR = "#555555"
MAX_OP_COLOURS = len(PALETTE)
MAX_LABELLED_NODES = 40
FIGURE_WIDTH = 12.0
ROW_HEIGHT = 0.45
SVG_HASHSALT = "graphir-report"
TIMELINE_FEATURE = "--emit=report -o"
"""The feature named when matplotlib (the ``report`` extra, for the pictures) is missing."""


def _time_unit(makespan: float) -> tuple[str, float]:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if makespan >= scale:
            return unit, scale
    return "ns", 1e-9


def bar_keys(report: Report) -> list[str]:
    """What colours each compute bar: its op type, or its micro-batch in a micro-batched graph.

    In a graph that ``microbatch`` (or ``data-parallel`` with micro-batches) rewrote, a bar is
    keyed ``micro-batch m`` by its copy's name (:func:`graphir.copies.copy_of`), and the shared
    nodes (variables, the gradients' sums, the updates) ``shared``: the timeline then shows each
    stage's schedule, its micro-batches' forward and backward passes.
    """
    nodes = report.index.nodes
    microbatches = report.module.metadata.get(MICROBATCHES_METADATA, 1)
    if not isinstance(microbatches, int) or microbatches <= 1:
        return [node.op for node in nodes]
    keys = []
    for node in nodes:
        _, m, _ = copy_of(node.name)
        keys.append(f"micro-batch {m}" if m >= 0 else "shared")
    return keys


def op_colours(report: Report) -> dict[str, str]:
    """Colour of each bar key (:func:`bar_keys`): the :data:`MAX_OP_COLOURS` busiest get the palette, others grey.

    Micro-batches take the palette in their order.
    """
    busy: dict[str, float] = defaultdict(float)
    durations = (report.sim.finish - report.sim.start).tolist()
    for key, seconds in zip(bar_keys(report), durations, strict=True):
        busy[key] += seconds
    if any(key.startswith("micro-batch ") for key in busy):
        ranked = sorted(busy, key=lambda k: (k == "shared", int(k.split()[-1]) if k != "shared" else 0))
    else:
        ranked = sorted(busy, key=lambda op: (-busy[op], op))
    colours = {op: PALETTE[k] for k, op in enumerate(ranked[:MAX_OP_COLOURS])}
    for op in ranked[MAX_OP_COLOURS:]:
        colours[op] = OTHER_COLOUR
    return colours


def render_timeline(report: Report, formats: tuple[str, ...] = ("png", "svg")) -> dict[str, bytes]:
    """Draw the timeline and return the encoded picture per format (``png``, ``svg``)."""
    matplotlib = require("matplotlib", "report", TIMELINE_FEATURE)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    sim = report.sim
    devices = list(sim.device_names)
    links = [(row.src, row.dst) for row in report.links]
    labels = devices + [f"{src}\u2192{dst}" for src, dst in links]
    unit, scale = _time_unit(report.makespan)
    colours = op_colours(report)

    figure = Figure(figsize=(FIGURE_WIDTH, 1.8 + ROW_HEIGHT * len(labels)), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    starts, finishes = (sim.start / scale).tolist(), (sim.finish / scale).tolist()
    small = report.index.num_nodes <= MAX_LABELLED_NODES
    # A thin white outline separates neighbouring bars of a small graph; on a big one it would
    # cover the many narrow bars and wash out their colours.
    outline: dict[str, Any] = {"edgecolor": "white", "linewidth": 0.3} if small else {"edgecolor": "none"}
    bars: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
    for u, key in enumerate(bar_keys(report)):
        bars[(int(report.device[u]), colours[key])].append((starts[u], finishes[u] - starts[u]))
    for (row, colour), spans in sorted(bars.items()):
        axes.broken_barh(spans, (row - 0.4, 0.8), facecolors=colour, **outline)
    link_row = {pair: len(devices) + k for k, pair in enumerate(links)}
    transfers: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for t in report.transfers:
        transfers[link_row[(t.src, t.dst)]].append((t.start / scale, (t.finish - t.start) / scale))
    for row, spans in sorted(transfers.items()):
        axes.broken_barh(spans, (row - 0.3, 0.6), facecolors=TRANSFER_COLOUR, **outline)
    if small:
        for u, node in enumerate(report.index.nodes):
            middle = (starts[u] + finishes[u]) / 2
            axes.text(middle, int(report.device[u]), node.name, ha="center", va="center", fontsize=7, clip_on=True)

    axes.set_yticks(range(len(labels)), labels)
    axes.set_ylim(len(labels) - 0.5, -0.5)
    axes.set_xlim(0, max(report.makespan / scale, 1e-12))
    axes.set_xlabel(f"time ({unit})")
    axes.set_axisbelow(True)
    axes.grid(axis="x", linewidth=0.3)
    module = report.module
    axes.set_title(f"@{module.name} on {module.cluster.spec}: makespan {report.makespan / scale:.3f} {unit}")
    handles = [Patch(facecolor=colour, label=op) for op, colour in colours.items() if colour != OTHER_COLOUR]
    if OTHER_COLOUR in colours.values():
        handles.append(Patch(facecolor=OTHER_COLOUR, label="other"))
    if report.transfers:
        handles.append(Patch(facecolor=TRANSFER_COLOUR, label="transfer"))
    axes.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)

    encoded: dict[str, bytes] = {}
    with matplotlib.rc_context({"svg.hashsalt": SVG_HASHSALT}):
        for fmt in formats:
            buffer = io.BytesIO()
            metadata = {"Date": None} if fmt == "svg" else {"Software": None} if fmt == "png" else None
            figure.savefig(buffer, format=fmt, metadata=metadata)
            encoded[fmt] = buffer.getvalue()
    return encoded
