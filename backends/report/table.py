"""The report's human table (the text of ``--emit=report``) and its JSON form.

Times print with three decimals in the largest unit below them (``4.020 ms``), byte sizes in
binary units with two decimals (``22.89 MiB``; plain bytes below 1 KiB), utilisation as a percentage
of the makespan, memory use as a percentage of the device's capacity. The JSON keeps exact numbers
(seconds, bytes).
"""

from __future__ import annotations

from typing import Any

from graphir.backends.report.data import Report


def format_seconds(seconds: float) -> str:
    """``4.020 ms``: three decimals in s, ms, us or ns (whichever keeps the number >= 1)."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.3f} {unit}"
    return f"{seconds / 1e-9:.3f} ns" if seconds else "0.000 s"


def format_size(count: int) -> str:
    """``22.89 MiB``: two decimals in the largest binary unit that keeps the number >= 1."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count / size:.2f} {unit}"
    return f"{count} B"


def _percent(fraction: float) -> str:
    return f"{100 * fraction:.1f}%"


def _columns(header: list[str], rows: list[list[str]], left: int) -> list[str]:
    """Rows aligned under ``header``: the first ``left`` columns left-aligned, the rest right-aligned."""
    widths = [max(len(row[c]) for row in [header, *rows]) for c in range(len(header))]
    lines = []
    for row in [header, *rows]:
        cells = [
            cell.ljust(w) if c < left else cell.rjust(w) for c, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  " + "  ".join(cells).rstrip())
    return lines


def format_table(report: Report) -> str:
    """The summary table: makespan, per-device busy/utilisation/memory, per-link bytes, OOM."""
    module = report.module
    oom = [row.name for row in report.devices if row.oom]
    moved = sum(row.nbytes for row in report.links)
    lines = [
        f"report: module @{module.name} on {module.cluster.spec} ({len(report.devices)} devices, "
        f"{report.index.num_nodes} nodes)",
        f"  makespan:   {format_seconds(report.makespan)}",
        f"  transfers:  {len(report.transfers)} ({format_size(moved)})",
        f"  OOM:        {', '.join(oom) if oom else 'none'}",
        "",
        "devices:",
    ]
    device_rows = [
        [
            row.name,
            row.kind,
            str(row.nodes),
            format_seconds(row.busy),
            _percent(row.utilisation),
            format_size(row.persistent),
            format_size(row.peak_memory),
            format_size(row.memory_limit),
            _percent(row.peak_memory / row.memory_limit if row.memory_limit else 0.0),
            "OOM" if row.oom else "",
        ]
        for row in report.devices
    ]
    header = ["device", "kind", "nodes", "busy", "util", "persistent", "peak mem", "capacity", "mem use", ""]
    lines += _columns(header, device_rows, left=2)
    lines += ["", "links:"]
    if not report.links:
        lines.append("  (no data crossed devices)")
    else:
        link_rows = [
            [
                f"{row.src}->{row.dst}",
                str(row.transfers),
                format_size(row.nbytes),
                format_seconds(row.busy),
                _percent(row.utilisation),
            ]
            for row in report.links
        ]
        lines += _columns(["link", "transfers", "bytes", "busy", "util"], link_rows, left=1)
    return "\n".join(lines) + "\n"


def report_json(report: Report) -> dict[str, Any]:
    """The report as JSON-ready data (seconds and bytes, exact).

    Schema::

        {"module", "cluster", "makespan", "oom": [device],
         "devices": [{"name", "kind", "nodes", "busy", "utilisation", "persistent", "peak_memory",
                      "memory_limit", "oom"}],
         "links": [{"src", "dst", "transfers", "bytes", "busy", "utilisation"}],
         "nodes": [{"id", "op", "group", "device", "start", "finish"}],
         "transfers": [{"value", "src", "dst", "bytes", "start", "finish"}]}
    """
    index = report.index
    names = report.sim.device_names
    start, finish = report.sim.start.tolist(), report.sim.finish.tolist()
    return {
        "module": report.module.name,
        "cluster": report.module.cluster.spec,
        "makespan": report.makespan,
        "oom": [row.name for row in report.devices if row.oom],
        "devices": [
            {
                "name": row.name,
                "kind": row.kind,
                "nodes": row.nodes,
                "busy": row.busy,
                "utilisation": row.utilisation,
                "persistent": row.persistent,
                "peak_memory": row.peak_memory,
                "memory_limit": row.memory_limit,
                "oom": row.oom,
            }
            for row in report.devices
        ],
        "links": [
            {
                "src": row.src,
                "dst": row.dst,
                "transfers": row.transfers,
                "bytes": row.nbytes,
                "busy": row.busy,
                "utilisation": row.utilisation,
            }
            for row in report.links
        ],
        "nodes": [
            {
                "id": node.name,
                "op": node.op,
                "group": node.group,
                "device": names[int(report.device[u])],
                "start": start[u],
                "finish": finish[u],
            }
            for u, node in enumerate(index.nodes)
        ],
        "transfers": [
            {"value": t.value, "src": t.src, "dst": t.dst, "bytes": t.nbytes, "start": t.start, "finish": t.finish}
            for t in report.transfers
        ],
    }
