"""The report as one self-contained HTML page: summary, timeline, memory bars, pipeline statistics.

:func:`render_html` turns a :class:`~graphir.backends.report.data.Report` into a single HTML5 file
that needs nothing else: the CSS is inline, the timeline is inline SVG
(:mod:`graphir.backends.report.gantt_svg`, one ``<rect>`` per node with a hover title), there is no
script and no link to any other file, so the page can be mailed or attached to a ticket. Sections:

* a header naming the module, the cluster and the pipeline that ran (when the driver told us, see
  :data:`graphir.emit.CURRENT_RUN`);
* ``table#summary``: makespan, nodes, coarse nodes, transfers, bytes moved, OOM devices;
  ``table#devices``: per device kind, nodes, busy time, utilisation, persistent / peak memory,
  capacity, memory use; ``table#links``: per channel transfers, bytes, busy time, utilisation.
  Every number cell carries its exact value in ``data-value`` (seconds, bytes, fractions) next to
  the rounded text, so tools and tests read the page without parsing units;
* ``section#timeline``: the op-colour legend and the Gantt chart;
* ``section#memory``: one bar per device, its length proportional to peak / capacity and split
  into persistent bytes and the activations live at the peak. The track spans
  ``max(100 %, largest use)`` of capacity, capped at :data:`MEMORY_SCALE_CAP` (a longer bar is
  clipped and marked), with a line at 100 %; an out-of-memory device is drawn red and badged ``OOM``;
* ``section#pipeline``: the executed passes (auto-inserted ones marked) and the statistics of the
  structural passes (:data:`STAT_PASSES`: fusion, placement, splitting, scheduling), leaving out
  wall-clock statistics (keys containing ``wall``) so the page is byte-identical for the same input.

The text is deterministic: no date, no random ids; floats in ``data-value`` print with ``repr``
(exact round trip).
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape

from graphir.backends.report.data import Report
from graphir.backends.report.gantt_svg import render_gantt_svg
from graphir.backends.report.table import format_seconds, format_size
from graphir.backends.report.timeline import OTHER_COLOUR, TRANSFER_COLOUR, op_colours
from graphir.emit import PipelineRun

MEMORY_SCALE_CAP = 2.0
"""The memory track ends at this multiple of capacity at most; longer bars are clipped and marked."""
STAT_PASSES = ("fuse", "place", "split", "schedule")
"""Passes whose statistics the page lists (the fusion and placement story of the run)."""
PERSISTENT_COLOUR = "#4e79a7"
ACTIVATION_COLOUR = "#a0cbe8"
OOM_COLOUR = "#d62728"
OOM_LIGHT_COLOUR = "#ee8a8b"

STYLE = f"""
:root {{ color-scheme: light; }}
body {{ font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #1d2129;
  margin: 0; background: #ffffff; }}
main {{ max-width: 1040px; margin: 0 auto; padding: 20px 24px 40px; }}
header h1 {{ font-size: 1.6em; margin: 0 0 4px; }}
header h1 .cluster {{ color: #5b6270; font-weight: normal; }}
header p {{ margin: 2px 0; color: #3c4250; }}
code {{ font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; font-size: 0.92em;
  background: #f1f2f4; padding: 1px 4px; border-radius: 3px; }}
h2 {{ font-size: 1.15em; margin: 28px 0 8px; border-bottom: 1px solid #dde0e4; padding-bottom: 4px; }}
table {{ border-collapse: collapse; font-size: 0.92em; }}
th, td {{ padding: 4px 10px; border-bottom: 1px solid #e6e8eb; text-align: left; vertical-align: top; }}
th {{ background: #f6f7f8; font-weight: 600; }}
td.num, th.num {{ text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }}
table#summary th {{ background: none; font-weight: 600; }}
tr.oom td {{ background: #fdecec; }}
.badge {{ display: inline-block; padding: 0 6px; border-radius: 8px; font-size: 0.8em; font-weight: 700;
  color: #ffffff; background: {OOM_COLOUR}; }}
.ok {{ color: #2b7a3d; font-weight: 600; }}
.legend {{ display: flex; flex-wrap: wrap; gap: 4px 14px; font-size: 0.85em; margin: 4px 0 8px; }}
.swatch {{ display: inline-block; width: 12px; height: 12px; border-radius: 2px; margin-right: 5px;
  vertical-align: -1px; }}
.figure {{ overflow-x: auto; }}
svg.gantt {{ max-width: 100%; height: auto; }}
.mem-row {{ display: grid; grid-template-columns: 110px 1fr 380px; align-items: center; gap: 12px;
  margin: 6px 0; font-size: 0.9em; }}
.mem-track {{ position: relative; height: 18px; background: #eef0f2; border-radius: 3px; }}
.mem-bar {{ position: absolute; left: 0; top: 0; bottom: 0; display: flex; min-width: 1px;
  border-radius: 3px; overflow: hidden; }}
.mem-bar.empty {{ min-width: 0; }}
.mem-persistent {{ background: {PERSISTENT_COLOUR}; }}
.mem-activation {{ background: {ACTIVATION_COLOUR}; }}
.mem-row.oom .mem-persistent {{ background: {OOM_COLOUR}; }}
.mem-row.oom .mem-activation {{ background: {OOM_LIGHT_COLOUR}; }}
.mem-row.oom .mem-label {{ color: {OOM_COLOUR}; font-weight: 700; }}
.mem-capacity {{ position: absolute; top: -3px; bottom: -3px; width: 0; border-left: 2px dashed #1d2129; }}
.mem-clipped {{ position: absolute; right: 2px; top: 0; color: #ffffff; font-weight: 700; font-size: 12px; }}
.mem-value {{ font-variant-numeric: tabular-nums; font-size: 0.92em; white-space: nowrap; }}
.note {{ color: #5b6270; font-size: 0.85em; }}
"""


def _percent(fraction: float) -> str:
    return f"{100 * fraction:.1f}%"


def _number(value: float | int) -> str:
    """An exact ``data-value``: ``repr`` of the float (round-trips) or the integer."""
    return repr(float(value)) if isinstance(value, float) else str(int(value))


def _cell(text: str, value: float | int | None = None, cls: str = "num") -> str:
    data = f' data-value="{_number(value)}"' if value is not None else ""
    return f'<td class="{cls}"{data}>{escape(text)}</td>'


def _stat_text(value: int | float | str) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _header(report: Report, run: PipelineRun | None) -> list[str]:
    module = report.module
    lines = [
        "<header>",
        f'<h1>@{escape(module.name)} <span class="cluster">on {escape(module.cluster.spec)}</span></h1>',
        f"<p>{len(report.devices)} devices, {report.index.num_nodes} nodes; "
        f"makespan {escape(format_seconds(report.makespan))}</p>",
    ]
    if run is not None and run.passes:
        pipeline = ",".join(spec for spec, _, _ in run.passes)
        lines.append(f'<p class="pipeline">pipeline: <code>{escape(pipeline)}</code></p>')
    lines.append("</header>")
    return lines


def _summary(report: Report) -> list[str]:
    quotient = report.index.quotient()
    moved = sum(row.nbytes for row in report.links)
    oom = [row.name for row in report.devices if row.oom]
    oom_cell = (
        "<td>" + " ".join(f'<span class="badge">OOM</span> {escape(name)}' for name in oom) + "</td>"
        if oom
        else '<td><span class="ok">none</span></td>'
    )
    return [
        '<section id="overview">',
        "<h2>Summary</h2>",
        '<table id="summary">',
        f'<tr data-key="makespan"><th>makespan</th>{_cell(format_seconds(report.makespan), report.makespan)}</tr>',
        f'<tr data-key="nodes"><th>nodes</th>{_cell(str(report.index.num_nodes), report.index.num_nodes)}</tr>',
        f'<tr data-key="coarse-nodes"><th>coarse nodes (after fusion)</th>'
        f"{_cell(str(quotient.num_groups), quotient.num_groups)}</tr>",
        f'<tr data-key="transfers"><th>transfers</th>{_cell(str(len(report.transfers)), len(report.transfers))}</tr>',
        f'<tr data-key="bytes-moved"><th>bytes moved</th>{_cell(format_size(moved), moved)}</tr>',
        f'<tr data-key="oom"><th>out of memory</th>{oom_cell}</tr>',
        "</table>",
        *_device_table(report),
        *_link_table(report),
        "</section>",
    ]


def _device_table(report: Report) -> list[str]:
    header = (
        "<tr><th>device</th><th>kind</th>"
        + "".join(
            f'<th class="num">{name}</th>'
            for name in ("nodes", "busy", "util", "persistent", "peak mem", "capacity", "mem use")
        )
        + "<th></th></tr>"
    )
    lines = ["<h3>Devices</h3>", '<table id="devices">', header]
    for row in report.devices:
        use = row.peak_memory / row.memory_limit if row.memory_limit else 0.0
        cells = [
            f"<td>{escape(row.name)}</td>",
            f"<td>{escape(row.kind)}</td>",
            _cell(str(row.nodes), row.nodes),
            _cell(format_seconds(row.busy), row.busy),
            _cell(_percent(row.utilisation), row.utilisation),
            _cell(format_size(row.persistent), row.persistent),
            _cell(format_size(row.peak_memory), row.peak_memory),
            _cell(format_size(row.memory_limit), row.memory_limit),
            _cell(_percent(use), use),
            '<td><span class="badge">OOM</span></td>' if row.oom else "<td></td>",
        ]
        cls = ' class="oom"' if row.oom else ""
        lines.append(f'<tr data-device="{escape(row.name)}"{cls}>{"".join(cells)}</tr>')
    lines.append("</table>")
    return lines


def _link_table(report: Report) -> list[str]:
    lines = ["<h3>Links</h3>"]
    if not report.links:
        return [*lines, '<p class="note" id="links">No data crossed devices.</p>']
    header = (
        "<tr><th>link</th>"
        + "".join(f'<th class="num">{name}</th>' for name in ("transfers", "bytes", "busy", "util"))
        + "</tr>"
    )
    lines += ['<table id="links">', header]
    for row in report.links:
        cells = [
            f"<td>{escape(row.src)} \u2192 {escape(row.dst)}</td>",
            _cell(str(row.transfers), row.transfers),
            _cell(format_size(row.nbytes), row.nbytes),
            _cell(format_seconds(row.busy), row.busy),
            _cell(_percent(row.utilisation), row.utilisation),
        ]
        lines.append(f'<tr data-src="{escape(row.src)}" data-dst="{escape(row.dst)}">{"".join(cells)}</tr>')
    lines.append("</table>")
    return lines


def _timeline(report: Report) -> list[str]:
    colours = op_colours(report)
    items = [(op, colour) for op, colour in colours.items() if colour != OTHER_COLOUR]
    if OTHER_COLOUR in colours.values():
        items.append(("other ops", OTHER_COLOUR))
    if report.transfers:
        items.append(("transfer", TRANSFER_COLOUR))
    legend = "".join(
        f'<span><span class="swatch" style="background:{colour}"></span>{escape(op)}</span>' for op, colour in items
    )
    return [
        '<section id="timeline">',
        "<h2>Timeline</h2>",
        '<p class="note">One row per device, then one per channel that moved data; hover a bar for its node '
        "and times. Ops are coloured by type, busiest types first (a micro-batched graph's by micro-batch).</p>",
        f'<div class="legend">{legend}</div>',
        '<div class="figure">',
        render_gantt_svg(report),
        "</div>",
        "</section>",
    ]


def memory_scale(report: Report) -> float:
    """Capacity multiple at the end of the memory track: ``max(1, largest peak / capacity)``, capped."""
    largest = max((row.peak_memory / row.memory_limit for row in report.devices if row.memory_limit), default=0.0)
    return min(max(1.0, largest), MEMORY_SCALE_CAP)


def _memory(report: Report) -> list[str]:
    scale = memory_scale(report)
    lines = [
        '<section id="memory">',
        "<h2>Memory</h2>",
        '<p class="note">Peak memory per device against its capacity (dashed line at 100%): '
        f'<span class="swatch" style="background:{PERSISTENT_COLOUR}"></span>persistent (weights) '
        f'<span class="swatch" style="background:{ACTIVATION_COLOUR}"></span>activations live at the peak; '
        "red: out of memory.</p>",
    ]
    capacity_left = 100.0 / scale
    for row in report.devices:
        use = row.peak_memory / row.memory_limit if row.memory_limit else 0.0
        width = 100.0 * min(use, scale) / scale
        persistent_share = 100.0 * row.persistent / row.peak_memory if row.peak_memory else 0.0
        persistent_share = min(persistent_share, 100.0)
        clipped = use > scale
        classes = "mem-row oom" if row.oom else "mem-row"
        bar_class = "mem-bar" if row.peak_memory else "mem-bar empty"
        value = (
            f"{format_size(row.peak_memory)} / {format_size(row.memory_limit)} ({_percent(use)}), "
            f"persistent {format_size(row.persistent)}"
        )
        badge = ' <span class="badge">OOM</span>' if row.oom else ""
        lines += [
            f'<div class="{classes}" data-device="{escape(row.name)}" data-peak="{row.peak_memory}" '
            f'data-persistent="{row.persistent}" data-capacity="{row.memory_limit}">',
            f'<span class="mem-label">{escape(row.name)}{badge}</span>',
            '<div class="mem-track">',
            f'<div class="{bar_class}" style="width:{width:.4f}%" title="{escape(value)}">'
            f'<div class="mem-persistent" style="width:{persistent_share:.4f}%"></div>'
            f'<div class="mem-activation" style="flex:1"></div></div>',
            f'<div class="mem-capacity" style="left:{capacity_left:.4f}%"></div>',
            '<span class="mem-clipped">\u00bb</span>' if clipped else "",
            "</div>",
            f'<span class="mem-value">{escape(value)}</span>',
            "</div>",
        ]
    lines.append("</section>")
    return [line for line in lines if line]


def _pipeline(report: Report, run: PipelineRun | None) -> list[str]:
    quotient = report.index.quotient()
    fused = int((quotient.group_ids >= 0).sum())
    used = sum(1 for row in report.devices if row.nodes)
    lines = [
        '<section id="pipeline">',
        "<h2>Fusion and placement</h2>",
        '<table id="structure">',
        f"<tr><th>nodes \u2192 coarse nodes</th><td>{report.index.num_nodes} \u2192 {quotient.num_groups}</td></tr>",
        f"<tr><th>fused groups</th><td>{fused}</td></tr>",
        f"<tr><th>devices used</th><td>{used} of {len(report.devices)}</td></tr>",
        "</table>",
    ]
    if run is None:
        lines.append('<p class="note">Pipeline not known (the page was not made by graphir-opt).</p>')
        return [*lines, "</section>"]
    if not run.passes:
        lines.append('<p class="note">No pass ran: the input was already placed and ordered.</p>')
        return [*lines, "</section>"]
    lines += ["<h3>Passes</h3>", '<table id="passes">', "<tr><th>#</th><th>pass</th><th>statistics</th></tr>"]
    for position, (spec, auto, stats) in enumerate(run.passes, start=1):
        name = spec.split("{", 1)[0]
        shown = _shown_stats(stats) if name in STAT_PASSES else {}
        stat_text = "<br>".join(f"<code>{escape(key)}</code> = {escape(_stat_text(v))}" for key, v in shown.items())
        mark = ' <span class="note">(auto: prerequisite)</span>' if auto else ""
        lines.append(f"<tr><td>{position}</td><td><code>{escape(spec)}</code>{mark}</td><td>{stat_text}</td></tr>")
    lines.append("</table>")
    return [*lines, "</section>"]


def _shown_stats(stats: Mapping[str, int | float | str]) -> dict[str, int | float | str]:
    """The statistics worth a page: all but wall-clock times (they differ from run to run)."""
    return {key: value for key, value in stats.items() if "wall" not in key}


def render_html(report: Report, run: PipelineRun | None = None) -> str:
    """The report as one self-contained HTML page (see the module docstring).

    Args:
        report: the simulated module.
        run: the pipeline that produced it (passes and statistics), when known.
    """
    module = report.module
    title = f"graphir report: @{module.name} on {module.cluster.spec}"
    body = [
        *_header(report, run),
        *_summary(report),
        *_timeline(report),
        *_memory(report),
        *_pipeline(report, run),
    ]
    return html_page(title, STYLE, body)


def html_page(title: str, style: str, body: list[str]) -> str:
    """A self-contained HTML page (no external references): ``title``, inline ``style``, ``body`` lines.

    Empty body lines are dropped. The report page and the placer comparison page share it.
    """
    lines = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<meta name="generator" content="graphir">',
        f"<title>{escape(title)}</title>",
        f"<style>{style}</style>",
        "</head>",
        "<body>",
        "<main>",
        *(line for line in body if line),
        "</main>",
        "</body>",
        "</html>",
    ]
    return "\n".join(lines) + "\n"
