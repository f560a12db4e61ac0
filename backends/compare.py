"""``--emit=compare``: the placer comparison recorded by the ``compare`` pass, as a table, JSON and an HTML page.

The ``compare`` pass (:mod:`graphir.passes.compare`; ``graphir-opt --compare=a,b,...`` appends it)
runs several placers on copies of the module and records a :class:`~graphir.comparison.Comparison`
in the module metadata. This emitter renders it; it never re-runs a placer. A module without a
comparison is a one-line error naming the pass to run.

The emitted text is the table (:func:`format_comparison`): one row per placer in the order asked,
with its makespan, its slowdown against the best, the wall-clock time the placer took, the peak
memory of every device (``!`` marks a device over capacity) and a verdict; ``*`` marks graphir's
answer (the fastest placement that fits). Two lines follow: what one device does (when ``single``
was compared; ``one device: out of memory (...)`` when the model does not fit) and graphir's answer.

Files, as for ``--emit=report``: ``-o PAGE.html`` writes the page alone, ``-o FILE.json`` the JSON
alone; any other ``-o PATH`` takes the table and gets ``BASE.json`` and ``BASE.html`` next to it
(``BASE`` is ``PATH`` without its suffix); ``-o DIR`` (an existing directory, or a path ending in
``/``) writes ``DIR/compare.txt``, ``DIR/compare.json`` and ``DIR/compare.html``.

The page (:func:`render_compare_html`) is one self-contained HTML file without script: the table,
then two bar charts, ``section#makespan`` (one bar per placer, length proportional to its makespan)
and ``section#memory`` (per placer, one bar per device: peak memory against capacity, with a line
at 100 %). Out-of-memory placements are red, the best is highlighted green, failed placers are listed
with their message. Every number cell carries its exact value in ``data-value``.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any

from graphir.backends.report.html import html_page
from graphir.comparison import Comparison, ComparisonRow, read_comparison
from graphir.emit import register_emitter
from graphir.errors import BackendError, GraphIRError
from graphir.fileio import write_atomically
from graphir.ir import Module

MAX_DEVICE_COLUMNS = 8
"""The table shows one peak-memory column per device up to this many devices, else the largest peak."""
MEMORY_SCALE_CAP = 2.0
"""Memory bars end at this multiple of capacity at most (longer ones are clipped and marked)."""
BEST_COLOUR = "#2b7a3d"
BAR_COLOUR = "#4e79a7"
OOM_COLOUR = "#d62728"


def format_seconds(seconds: float) -> str:
    """``4.020 ms``: three decimals in s, ms, us or ns (whichever keeps the number >= 1)."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.3f} {unit}"
    return f"{seconds / 1e-9:.3f} ns" if seconds else "0 s"


def format_size(count: int) -> str:
    """``22.89 MiB``: two decimals in the largest binary unit that keeps the number >= 1."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count / size:.2f} {unit}"
    return f"{count} B"


def comparison_of(module: Module) -> Comparison:
    """The module's recorded comparison.

    Raises:
        BackendError: the module holds none (the ``compare`` pass did not run) or a malformed one.
    """
    try:
        comparison = read_comparison(module)
    except GraphIRError as exc:  # a hand-edited header
        raise BackendError(f"--emit=compare: {exc.message}") from None
    if comparison is None:
        raise BackendError(
            "--emit=compare: the module holds no placer comparison; "
            "run the 'compare' pass (--compare=single,m-sct,... or --passes='...,compare{algos=...}')"
        )
    return comparison


def _verdict(row: ComparisonRow, comparison: Comparison) -> str:
    if row.status == "failed":
        return f"failed: {row.error}"
    if row.status == "oom":
        return f"OUT OF MEMORY on {', '.join(row.oom_devices)}"
    used = sum(1 for count in row.nodes if count)
    return f"fits ({used} of {len(comparison.devices)} devices)"


def _peak_cells(row: ComparisonRow, comparison: Comparison) -> list[str]:
    if row.status == "failed":
        width = len(comparison.devices) if len(comparison.devices) <= MAX_DEVICE_COLUMNS else 1
        return ["-"] * width
    marks = [
        format_size(peak) + ("!" if peak > capacity else "")
        for peak, capacity in zip(row.peak_memory, comparison.capacity, strict=True)
    ]
    if len(comparison.devices) <= MAX_DEVICE_COLUMNS:
        return marks
    k = max(range(len(row.peak_memory)), key=lambda d: row.peak_memory[d])
    return [f"{marks[k]} ({comparison.devices[k]})"]


def _device_list(comparison: Comparison) -> str:
    """``gpu0 1.00 GiB, gpu1 1.00 GiB``."""
    pairs = zip(comparison.devices, comparison.capacity, strict=True)
    return ", ".join(f"{device} {format_size(capacity)}" for device, capacity in pairs)


def _uses(row: ComparisonRow, comparison: Comparison) -> list[float]:
    """Peak memory over capacity per device (0 for a device without capacity)."""
    pairs = zip(row.peak_memory, comparison.capacity, strict=True)
    return [peak / capacity if capacity else 0.0 for peak, capacity in pairs]


def _slowdown(row: ComparisonRow, best: ComparisonRow | None) -> str:
    if row.status == "failed" or best is None or best.makespan <= 0:
        return "-"
    return f"{row.makespan / best.makespan:.2f}x"


def _best(comparison: Comparison) -> ComparisonRow | None:
    return comparison.row(comparison.best) if comparison.best else None


def one_device_line(comparison: Comparison) -> str | None:
    """``one device: out of memory (gpu0 needs 1.66 GiB of 1.00 GiB)``, or its makespan; None without ``single``."""
    try:
        row = comparison.row("single")
    except KeyError:
        return None
    if row.status == "failed":
        return f"one device: failed ({row.error})"
    if row.status == "oom":
        needs = ", ".join(
            f"{device} needs {format_size(peak)} of {format_size(capacity)}"
            for device, peak, capacity in zip(comparison.devices, row.peak_memory, comparison.capacity, strict=True)
            if peak > capacity
        )
        return f"one device: out of memory ({needs})"
    return f"one device: fits, makespan {format_seconds(row.makespan)}"


def answer_line(comparison: Comparison) -> str:
    """``graphir's answer: m-sct, makespan 57.500 ms (placed in 0.44 s)``, or why there is none."""
    best = _best(comparison)
    if best is None:
        return "graphir's answer: none of the compared placements fits in memory"
    return (
        f"graphir's answer: {best.algo}, makespan {format_seconds(best.makespan)} "
        f"(placed in {best.place_seconds:.2f} s), fits in memory"
    )


def format_comparison(comparison: Comparison) -> str:
    """The comparison as a text table plus the one-device and answer lines (see the module docstring)."""
    devices = comparison.devices
    peak_headers = [f"peak {d}" for d in devices] if len(devices) <= MAX_DEVICE_COLUMNS else ["largest peak"]
    header = ["", "placer", "makespan", "vs best", "place time", *peak_headers, "verdict"]
    best = _best(comparison)
    rows = []
    for row in comparison.rows:
        rows.append(
            [
                "*" if best is not None and row.algo == best.algo else "",
                row.algo,
                "-" if row.status == "failed" else format_seconds(row.makespan),
                _slowdown(row, best),
                f"{row.place_seconds:.2f} s",
                *_peak_cells(row, comparison),
                _verdict(row, comparison),
            ]
        )
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]
    left = {0, 1, len(header) - 1}
    lines = [
        f"placer comparison: @{comparison.module} on {comparison.cluster} "
        f"({len(devices)} devices: {_device_list(comparison)}; "
        f"simulated with congestion={comparison.congestion}, order={comparison.order})",
    ]
    for r in [header, *rows]:
        cells = [r[c].ljust(widths[c]) if c in left else r[c].rjust(widths[c]) for c in range(len(header))]
        lines.append("  ".join(cells).rstrip())
    single = one_device_line(comparison)
    if single is not None:
        lines.append(single)
    lines.append(answer_line(comparison))
    return "\n".join(lines) + "\n"


def comparison_json(comparison: Comparison) -> dict[str, Any]:
    """The comparison as JSON (exact seconds and bytes) with the two summary lines."""
    out = comparison.to_json()
    out["one_device"] = one_device_line(comparison)
    out["answer"] = answer_line(comparison)
    return out


# --------------------------------------------------------------------------- HTML

STYLE = f"""
:root {{ color-scheme: light; }}
body {{ font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #1d2129;
  margin: 0; background: #ffffff; }}
main {{ max-width: 1040px; margin: 0 auto; padding: 20px 24px 40px; }}
header h1 {{ font-size: 1.6em; margin: 0 0 4px; }}
header h1 .cluster {{ color: #5b6270; font-weight: normal; }}
header p {{ margin: 2px 0; color: #3c4250; }}
h2 {{ font-size: 1.15em; margin: 28px 0 8px; border-bottom: 1px solid #dde0e4; padding-bottom: 4px; }}
h3 {{ font-size: 1em; margin: 14px 0 4px; }}
table {{ border-collapse: collapse; font-size: 0.92em; }}
th, td {{ padding: 4px 10px; border-bottom: 1px solid #e6e8eb; text-align: left; vertical-align: top; }}
th {{ background: #f6f7f8; font-weight: 600; }}
td.num, th.num {{ text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }}
tr.best td {{ background: #e7f4ea; font-weight: 600; }}
tr.oom td {{ background: #fdecec; }}
tr.failed td {{ color: #5b6270; }}
.badge {{ display: inline-block; padding: 0 6px; border-radius: 8px; font-size: 0.8em; font-weight: 700;
  color: #ffffff; background: {OOM_COLOUR}; }}
.badge.best {{ background: {BEST_COLOUR}; }}
.answer {{ font-size: 1.05em; margin: 10px 0; }}
.bar-row {{ display: grid; grid-template-columns: 120px 1fr 200px; align-items: center; gap: 12px;
  margin: 5px 0; font-size: 0.9em; }}
.track {{ position: relative; height: 18px; background: #eef0f2; border-radius: 3px; }}
.bar {{ position: absolute; left: 0; top: 0; bottom: 0; min-width: 1px; border-radius: 3px;
  background: {BAR_COLOUR}; }}
.bar-row.best .bar {{ background: {BEST_COLOUR}; }}
#makespan .bar-row.oom .bar, .dev-bar.oom .bar, .bar-row.best .dev-bar.oom .bar {{ background: {OOM_COLOUR}; }}
.bar.empty {{ min-width: 0; }}
.bar-row.oom .label {{ color: {OOM_COLOUR}; font-weight: 700; }}
.bar-row.best .label {{ color: {BEST_COLOUR}; font-weight: 700; }}
.capacity {{ position: absolute; top: -3px; bottom: -3px; width: 0; border-left: 2px dashed #1d2129; }}
.clipped {{ position: absolute; right: 2px; top: 0; color: #ffffff; font-weight: 700; font-size: 12px; }}
.value {{ font-variant-numeric: tabular-nums; font-size: 0.92em; white-space: nowrap; }}
.devices {{ display: grid; gap: 3px; }}
.dev-bar {{ display: grid; grid-template-columns: 54px 1fr; gap: 6px; align-items: center; font-size: 0.8em; }}
.dev-bar .track {{ height: 10px; }}
.note {{ color: #5b6270; font-size: 0.85em; }}
"""


def _number(value: float | int) -> str:
    return repr(float(value)) if isinstance(value, float) else str(int(value))


def _cell(text: str, value: float | int | None = None) -> str:
    data = f' data-value="{_number(value)}"' if value is not None else ""
    return f'<td class="num"{data}>{escape(text)}</td>'


def _row_class(row: ComparisonRow, comparison: Comparison) -> str:
    if row.algo == comparison.best:
        return "best"
    return {"ok": "", "oom": "oom", "failed": "failed"}[row.status]


def _table_html(comparison: Comparison) -> list[str]:
    best = _best(comparison)
    header = "".join(
        f'<th class="num">{escape(name)}</th>'
        for name in ("makespan", "vs best", "place time", *(f"peak {d}" for d in comparison.devices))
    )
    lines = ['<table id="comparison">', f"<tr><th>placer</th>{header}<th>verdict</th></tr>"]
    for row in comparison.rows:
        cls = _row_class(row, comparison)
        badge = ' <span class="badge best">best</span>' if cls == "best" else ""
        if row.status == "oom":
            badge = ' <span class="badge">OOM</span>'
        cells = [f"<td>{escape(row.algo)}{badge}</td>"]
        if row.status == "failed":
            cells += ['<td class="num">-</td>'] * (3 + len(comparison.devices))
            cells[3] = _cell(f"{row.place_seconds:.2f} s", row.place_seconds)
        else:
            cells += [
                _cell(format_seconds(row.makespan), row.makespan),
                _cell(_slowdown(row, best), row.makespan / best.makespan if best and best.makespan else None),
                _cell(f"{row.place_seconds:.2f} s", row.place_seconds),
                *(_cell(format_size(peak), peak) for peak in row.peak_memory),
            ]
        cells.append(f"<td>{escape(_verdict(row, comparison))}</td>")
        attr = f' class="{cls}"' if cls else ""
        lines.append(f'<tr data-algo="{escape(row.algo)}" data-status="{row.status}"{attr}>{"".join(cells)}</tr>')
    lines.append("</table>")
    return lines


def _makespan_bars(comparison: Comparison) -> list[str]:
    placed = [row for row in comparison.rows if row.status != "failed"]
    longest = max((row.makespan for row in placed), default=0.0) or 1.0
    lines = [
        '<section id="makespan">',
        "<h2>Makespan</h2>",
        '<p class="note">Simulated time of one step per placer (shorter is better); green: the best placement '
        "that fits, red: out of memory.</p>",
    ]
    for row in placed:
        cls = " ".join(["bar-row", _row_class(row, comparison)]).strip()
        width = 100.0 * row.makespan / longest
        lines += [
            f'<div class="{cls}" data-algo="{escape(row.algo)}" data-makespan="{_number(row.makespan)}">',
            f'<span class="label">{escape(row.algo)}</span>',
            f'<div class="track"><div class="bar" style="width:{width:.4f}%"></div></div>',
            f'<span class="value">{escape(format_seconds(row.makespan))}</span>',
            "</div>",
        ]
    failed = [row for row in comparison.rows if row.status == "failed"]
    for row in failed:
        lines.append(f'<p class="note" data-algo="{escape(row.algo)}">{escape(row.algo)}: {escape(row.error)}</p>')
    lines.append("</section>")
    return lines


def _memory_bars(comparison: Comparison) -> list[str]:
    placed = [row for row in comparison.rows if row.status != "failed"]
    largest = max((use for row in placed for use in _uses(row, comparison)), default=0.0)
    scale = min(max(1.0, largest), MEMORY_SCALE_CAP)
    capacity_left = 100.0 / scale
    lines = [
        '<section id="memory">',
        "<h2>Peak memory per device</h2>",
        '<p class="note">Per placer, one bar per device: peak memory against the device\'s capacity (dashed '
        "line at 100%); red: out of memory.</p>",
    ]
    for row in placed:
        cls = " ".join(["bar-row", _row_class(row, comparison)]).strip()
        worst = max(_uses(row, comparison), default=0.0)
        lines += [
            f'<div class="{cls}" data-algo="{escape(row.algo)}">',
            f'<span class="label">{escape(row.algo)}</span>',
            '<div class="devices">',
        ]
        for device, peak, capacity in zip(comparison.devices, row.peak_memory, comparison.capacity, strict=True):
            use = peak / capacity if capacity else 0.0
            width = 100.0 * min(use, scale) / scale
            over = " oom" if peak > capacity else ""
            bar_class = "bar" if peak else "bar empty"
            title = f"{device}: {format_size(peak)} of {format_size(capacity)} ({100 * use:.1f}%)"
            lines += [
                f'<div class="dev-bar{over}" data-device="{escape(device)}" data-peak="{peak}" '
                f'data-capacity="{capacity}">',
                f"<span>{escape(device)}</span>",
                f'<div class="track" title="{escape(title)}"><div class="{bar_class}" '
                f'style="width:{width:.4f}%"></div>'
                f'<div class="capacity" style="left:{capacity_left:.4f}%"></div>'
                + ('<span class="clipped">\u00bb</span>' if use > scale else "")
                + "</div>",
                "</div>",
            ]
        lines += ["</div>", f'<span class="value">largest use {100 * worst:.1f}%</span>', "</div>"]
    lines.append("</section>")
    return lines


def render_compare_html(comparison: Comparison) -> str:
    """The comparison as one self-contained HTML page (see the module docstring)."""
    title = f"graphir placer comparison: @{comparison.module} on {comparison.cluster}"
    single = one_device_line(comparison)
    devices = ", ".join(f"{d} ({format_size(c)})" for d, c in zip(comparison.devices, comparison.capacity, strict=True))
    body = [
        "<header>",
        f'<h1>@{escape(comparison.module)} <span class="cluster">on {escape(comparison.cluster)}</span></h1>',
        f"<p>{len(comparison.rows)} placers on {len(comparison.devices)} devices: {escape(devices)}; "
        f"simulated with congestion={escape(comparison.congestion)}, order={escape(comparison.order)}.</p>",
        "</header>",
        '<section id="overview">',
        "<h2>Comparison</h2>",
        f'<p class="answer" id="answer">{escape(answer_line(comparison))}</p>',
        f'<p id="one-device">{escape(single)}</p>' if single else "",
        *_table_html(comparison),
        "</section>",
        *_makespan_bars(comparison),
        *_memory_bars(comparison),
    ]
    return html_page(title, STYLE, body)


# --------------------------------------------------------------------------- files


def compare_paths(output: Path) -> dict[str, Path]:
    """The files ``-o output`` produces: ``text``, ``json`` and ``html`` (one of them alone for ``.html``/``.json``)."""
    if output.is_dir():
        return {"text": output / "compare.txt", "json": output / "compare.json", "html": output / "compare.html"}
    if output.suffix == ".html":
        return {"html": output}
    if output.suffix == ".json":
        return {"json": output}
    base = output.with_suffix("") if output.suffix else output
    return {"text": output, "json": base.with_name(base.name + ".json"), "html": base.with_name(base.name + ".html")}


@register_emitter(
    "compare",
    "the placer comparison of the 'compare' pass (--compare=...): a table; with -o also JSON and an HTML page "
    "(-o PAGE.html or FILE.json: that file alone)",
    writes_files=True,
)
def emit_compare(module: Module, output: Path | None = None) -> str:
    """The table; with ``output`` also the JSON and HTML files (see the module docstring)."""
    comparison = comparison_of(module)
    if output is None:
        return format_comparison(comparison)
    paths = compare_paths(output)
    page = render_compare_html(comparison)
    data = json.dumps(comparison_json(comparison), indent=1, allow_nan=False) + "\n"
    if "text" not in paths:
        return page if "html" in paths else data
    write_atomically(paths["json"], data, BackendError)
    write_atomically(paths["html"], page, BackendError)
    return format_comparison(comparison)
