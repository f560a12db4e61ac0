"""The timeline (Gantt chart) as hand-written SVG, for embedding in the HTML report.

The matplotlib timeline (:mod:`graphir.backends.report.timeline`) is a picture; this one is a
document: every scheduled node is one ``<rect class="node" data-node="NAME">`` and every transfer
one ``<rect class="transfer">``, each with a ``<title>`` that a browser shows on hover (node, op,
device, start, finish). Rows and colours match the matplotlib chart: one row per device in cluster
order, then one per channel that moved data; compute bars take the op-type colours of
:func:`~graphir.backends.report.timeline.op_colours`.

Geometry: the plot spans :data:`WIDTH` user units; time 0 sits at :data:`LABEL_WIDTH` and the
makespan at ``WIDTH - RIGHT_MARGIN``, so a node's ``x`` is
``LABEL_WIDTH + start / makespan * plot_width``. A bar is written with its exact width (it may be
far below a pixel on a big graph; the browser still paints a hairline); a node's name is written on
its bar only when it fits. Coordinates print with two decimals and no element carries a random
id, so the text is deterministic. The SVG has no ``xmlns`` and no links: inside an HTML page the
parser puts it in the SVG namespace itself.
"""

from __future__ import annotations

import math
from collections import Counter
from html import escape

from graphir.backends.report.data import Report
from graphir.backends.report.table import format_seconds, format_size
from graphir.backends.report.timeline import TRANSFER_COLOUR, bar_keys, op_colours

WIDTH = 1000.0
LABEL_WIDTH = 132.0
RIGHT_MARGIN = 16.0
TOP_MARGIN = 8.0
ROW_HEIGHT = 26.0
NODE_BAR_HEIGHT = 20.0
TRANSFER_BAR_HEIGHT = 12.0
AXIS_HEIGHT = 36.0
CHAR_WIDTH = 6.2
"""Estimated advance of one character of the 10.5-unit bar labels (decides whether a name fits)."""
MAX_TICKS = 8


def plot_width() -> float:
    """Width of the time axis in user units."""
    return WIDTH - LABEL_WIDTH - RIGHT_MARGIN


def time_unit(seconds: float) -> tuple[str, float]:
    """The unit (and its length in seconds) in which ``seconds`` is at least 1: s, ms, us or ns."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return unit, scale
    return "ns", 1e-9


def tick_step(span: float, max_ticks: int = MAX_TICKS) -> float:
    """The smallest step of the form 1, 2 or 5 times a power of ten giving at most ``max_ticks`` intervals."""
    if span <= 0:
        return 1.0
    exponent = math.floor(math.log10(span / max_ticks))
    for power in (exponent, exponent + 1):
        for mantissa in (1, 2, 5):
            step = mantissa * 10.0**power
            if span / step <= max_ticks + 1e-9:
                return step
    return 10.0 ** (exponent + 2)


def _text_colour(fill: str) -> str:
    """Black or white, whichever reads better on the ``#rrggbb`` colour ``fill`` (relative luminance)."""
    red, green, blue = (int(fill[k : k + 2], 16) / 255 for k in (1, 3, 5))
    luminance = 0.2126 * red + 0.7152 * green + 0.0722 * blue
    return "#111111" if luminance > 0.5 else "#ffffff"


def _fmt(number: float) -> str:
    """A coordinate: two decimals, no negative zero."""
    text = f"{number:.2f}"
    return "0.00" if text == "-0.00" else text


def render_gantt_svg(report: Report) -> str:
    """The timeline of ``report`` as an ``<svg>`` element (text, no XML declaration)."""
    sim = report.sim
    devices = list(sim.device_names)
    links = [(row.src, row.dst) for row in report.links]
    labels = devices + [f"{src} \u2192 {dst}" for src, dst in links]
    span = report.makespan if report.makespan > 0 else 1e-9
    unit, scale = time_unit(span)
    width = plot_width()
    height = TOP_MARGIN + ROW_HEIGHT * len(labels) + AXIS_HEIGHT
    bottom = TOP_MARGIN + ROW_HEIGHT * len(labels)

    def x_of(seconds: float) -> float:
        return LABEL_WIDTH + seconds / span * width

    out = [
        f'<svg class="gantt" viewBox="0 0 {_fmt(WIDTH)} {_fmt(height)}" width="{_fmt(WIDTH)}" '
        f'height="{_fmt(height)}" role="img" aria-label="timeline of @{escape(report.module.name)}" '
        'font-family="system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif">'
    ]
    # Row backgrounds (alternating) and labels.
    for row, label in enumerate(labels):
        y = TOP_MARGIN + row * ROW_HEIGHT
        shade = "#f4f5f7" if row % 2 == 0 else "#ffffff"
        out.append(
            f'<rect class="row" x="{_fmt(LABEL_WIDTH)}" y="{_fmt(y)}" width="{_fmt(width)}" '
            f'height="{_fmt(ROW_HEIGHT)}" fill="{shade}"/>'
        )
        out.append(
            f'<text class="row-label" x="{_fmt(LABEL_WIDTH - 8)}" y="{_fmt(y + ROW_HEIGHT / 2)}" '
            f'text-anchor="end" dominant-baseline="central" font-size="12" fill="#1d2129">{escape(label)}</text>'
        )
    # Time axis: grid lines and tick labels in the makespan's unit.
    step = tick_step(span / scale)
    decimals = max(0, -math.floor(math.log10(step)))
    ticks = int(math.floor(span / scale / step + 1e-9))
    for k in range(ticks + 1):
        x = x_of(k * step * scale)
        out.append(
            f'<line class="grid" x1="{_fmt(x)}" y1="{_fmt(TOP_MARGIN)}" x2="{_fmt(x)}" y2="{_fmt(bottom + 4)}" '
            'stroke="#c9ccd1" stroke-width="0.6"/>'
        )
        out.append(
            f'<text class="tick" x="{_fmt(x)}" y="{_fmt(bottom + 16)}" text-anchor="middle" '
            f'font-size="11" fill="#1d2129">{k * step:.{decimals}f}</text>'
        )
    out.append(
        f'<text class="axis-label" x="{_fmt(LABEL_WIDTH + width / 2)}" y="{_fmt(bottom + 31)}" '
        f'text-anchor="middle" font-size="12" fill="#1d2129">time ({unit})</text>'
    )
    # Compute bars, one per node, in device order then start time.
    colours = op_colours(report)
    keys = bar_keys(report)
    starts, finishes = sim.start.tolist(), sim.finish.tolist()
    device_of = report.device.tolist()
    order = sorted(range(report.index.num_nodes), key=lambda u: (device_of[u], starts[u], u))
    names = sim.device_names
    # A white outline separates neighbouring bars while they are a few units wide on average; on a
    # crowded row it would cover the hairline bars and wash out their colours.
    link_row = {pair: len(devices) + k for k, pair in enumerate(links)}
    per_row = Counter(device_of) + Counter(link_row[(t.src, t.dst)] for t in report.transfers)
    crowded = max(per_row.values(), default=0) > width / 4
    outline = "" if crowded else ' stroke="#ffffff" stroke-width="0.5"'
    for u in order:
        node = report.index.nodes[u]
        row = device_of[u]
        x, x_end = x_of(starts[u]), x_of(finishes[u])
        y = TOP_MARGIN + row * ROW_HEIGHT + (ROW_HEIGHT - NODE_BAR_HEIGHT) / 2
        fill = colours[keys[u]]
        tip = (
            f"{node.name} ({node.op}) on {names[row]}: {format_seconds(starts[u])} \u2192 "
            f"{format_seconds(finishes[u])} ({format_seconds(finishes[u] - starts[u])})"
        )
        out.append(
            f'<rect class="node" data-node="{escape(node.name)}" x="{_fmt(x)}" y="{_fmt(y)}" '
            f'width="{_fmt(x_end - x)}" height="{_fmt(NODE_BAR_HEIGHT)}" fill="{fill}"{outline}>'
            f"<title>{escape(tip)}</title></rect>"
        )
        if (x_end - x) >= CHAR_WIDTH * len(node.name) + 6:
            out.append(
                f'<text class="bar-label" x="{_fmt((x + x_end) / 2)}" y="{_fmt(y + NODE_BAR_HEIGHT / 2)}" '
                f'text-anchor="middle" dominant-baseline="central" font-size="10.5" '
                f'fill="{_text_colour(fill)}" pointer-events="none">{escape(node.name)}</text>'
            )
    # Transfers, one bar each on their channel's row.
    for transfer in report.transfers:
        row = link_row[(transfer.src, transfer.dst)]
        x, x_end = x_of(transfer.start), x_of(transfer.finish)
        y = TOP_MARGIN + row * ROW_HEIGHT + (ROW_HEIGHT - TRANSFER_BAR_HEIGHT) / 2
        tip = (
            f"%{transfer.value}: {transfer.src} \u2192 {transfer.dst}, {format_size(transfer.nbytes)}, "
            f"{format_seconds(transfer.start)} \u2192 {format_seconds(transfer.finish)}"
        )
        out.append(
            f'<rect class="transfer" data-value="{escape(transfer.value)}" x="{_fmt(x)}" y="{_fmt(y)}" '
            f'width="{_fmt(x_end - x)}" height="{_fmt(TRANSFER_BAR_HEIGHT)}" fill="{TRANSFER_COLOUR}"{outline}>'
            f"<title>{escape(tip)}</title></rect>"
        )
    out.append(
        f'<line class="axis" x1="{_fmt(LABEL_WIDTH)}" y1="{_fmt(bottom)}" x2="{_fmt(LABEL_WIDTH + width)}" '
        f'y2="{_fmt(bottom)}" stroke="#555555" stroke-width="1"/>'
    )
    out.append("</svg>")
    return "\n".join(out)
