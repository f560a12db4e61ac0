"""devtools/placement_check.py: issue 15's checks on a hand-made placement table.

One (model, cluster) with two placer cells and auto: single 1.0 s on one device, heft 0.9 s on two,
auto 0.8 s on two (portfolio 0.9 s -> refined 0.8 s: 11.11 %, its second stage took 2 moves in 5
simulations). The fastest fitting cell (auto) is spread, so the cell counts as spread, and its gain
(>= 5 %) counts; the offload column reads ``2/5 -> 800.0 (7 nodes)``. Without the second stage's
statistics the column is ``-``.
"""

from __future__ import annotations

from devtools.placement_check import check


def _cell(label: str, makespan: float, devices: int, auto: dict | None = None) -> dict:
    peaks = {f"g{k}": (1 if k < devices else 0) for k in range(2)}
    return {
        "model": "zoo:m",
        "cluster": "c",
        "label": label,
        "makespan": makespan,
        "peak_memory": peaks,
        "oom": [],
        "error": None,
        "auto": auto or {},
    }


STATS = {
    "auto.chosen": "heft",
    "auto.portfolio-ms": 900.0,
    "auto.refined-ms": 800.0,
    "auto.refine-gain-pct": 11.11,
    "auto.refine-sims": 9,
    "auto.offload-sims": 5,
    "auto.offload-moves": 2,
    "auto.offload-nodes": 7,
    "auto.offload-ms": 800.0,
}


def test_offload_column_and_counts() -> None:
    rows, counts = check([_cell("single", 1.0, 1), _cell("heft", 0.9, 2), _cell("auto", 0.8, 2, STATS)])
    assert counts["spread"] == 1 and counts["spread-gain"] == 1
    assert counts["worse"] == counts["worse-single"] == counts["no-fit"] == 0
    assert "| 9 | 2/5 -> 800.0 (7 nodes) | ok |" in rows[0]


def test_offload_column_without_the_second_stage() -> None:
    stats = {k: v for k, v in STATS.items() if not k.startswith("auto.offload")}
    rows, _ = check([_cell("single", 1.0, 1), _cell("auto", 0.8, 2, stats)])
    assert "| 9 | - | ok |" in rows[0]
