"""The replication suite (``python -m devtools.replicate``) in its ``--quick`` setting."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from devtools.replicate import celeritas
from devtools.replicate.__main__ import main, parse_only

NUMBER = re.compile(r"^(OOM \()?\d+\.\d+\)?$")


def tables(text: str) -> list[tuple[str, list[dict[str, str]]]]:
    """Every Markdown table of ``text`` in order: (header line, rows as dicts)."""
    found: list[tuple[str, list[dict[str, str]]]] = []
    lines = text.splitlines()
    for i, line in enumerate(lines[:-1]):
        if not line.startswith("| ") or not lines[i + 1].startswith("|--") and not lines[i + 1].startswith("|---"):
            continue
        header = [c.strip() for c in line.strip("|").split(" | ")]
        rows = []
        for row in lines[i + 2 :]:
            if not row.startswith("|"):
                break
            cells = [c.strip() for c in row.strip().strip("|").split(" | ")]
            assert len(cells) == len(header), row
            rows.append(dict(zip(header, cells, strict=True)))
        found.append((line, rows))
    return found


def find(found: list[tuple[str, list[dict[str, str]]]], *columns: str) -> list[dict[str, str]]:
    """The first table whose header has exactly ``columns`` (ours come before the paper's own)."""
    matches = [rows for header, rows in found if header.strip("|").strip().split(" | ") == list(columns)]
    assert matches, (columns, [header for header, _ in found])
    return matches[0]


CELL = re.compile(r"^(?:OOM \()?([+-]?\d+(?:\.(\d+))?)(%|x)?\)?$")


def number(text: str) -> tuple[float, float]:
    """A table cell's number (the makespan inside ``OOM (...)`` too) and half a unit of its last digit."""
    match = CELL.match(text)
    assert match, text
    half = 0.5 * 10.0 ** -len(match.group(2) or "")
    return float(match.group(1)), half


def ratio_bound(*cells: str) -> float:
    """Relative error of a ratio of these printed cells, from their rounding."""
    return sum(number(c)[1] / abs(number(c)[0]) for c in cells)


def check_ratio(printed: str, value: float, ratio: float, *cells: str, percent: bool = False) -> None:
    """``printed`` (``+12.3%``, ``0.78x``) is ``value``, recomputed here from the printed ``cells``.

    ``ratio`` is the quotient of the cells that ``value`` is made of: its rounding error bounds the gap.
    """
    shown, half = number(printed)
    if percent:
        shown, half = shown / 100, half / 100
    assert abs(shown - value) <= half + abs(ratio) * ratio_bound(*cells) + 1e-12, (printed, value, cells)


@pytest.fixture(scope="module")
def quick_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("replicate")
    assert main(["--quick", "--only=celeritas,pesto,moirai", "--out", str(out)]) == 0
    return out


def test_celeritas_tables(quick_out: Path) -> None:
    text = (quick_out / "replicate_celeritas.md").read_text()
    found = tables(text)
    fit = find(found, "model", "nodes", "peak on gpu0 (GiB)", "memory (GiB)", "fits one device")
    assert [row["model"] for row in fit] == ["squeezenet.onnx"]
    assert fit[0]["fits one device"] == "no (OOM)" and fit[0]["nodes"] == "105"
    t2 = find(found, "model", "nodes", "CCR", "nodes after", "CCR after", "fewer nodes", "lower CCR")
    ours = [row for row in t2 if row["model"] == "squeezenet.onnx"]
    assert len(ours) == 1 and int(ours[0]["nodes"]) == 105 and 1 <= int(ours[0]["nodes after"]) < 105
    t3 = find(
        found, "model", "Metis", "m-TOPO", "m-ETF", "m-SCT", "Order-Place", "Celeritas", "Celeritas vs best other"
    )
    assert len(t3) == 1
    for label in ("Metis", "m-TOPO", "m-ETF", "m-SCT", "Order-Place", "Celeritas"):
        assert NUMBER.match(t3[0][label]), t3[0][label]
    # The claims, recomputed from the printed cells: fusion ratios, and Celeritas against the best
    # other placement that fits memory (best / Celeritas - 1; "-" when Celeritas or every other is OOM).
    for row in t2:
        fewer = int(row["nodes"]) / int(row["nodes after"])
        check_ratio(row["fewer nodes"], fewer, fewer, row["nodes"], row["nodes after"])
        lower = number(row["CCR"])[0] / number(row["CCR after"])[0]
        check_ratio(row["lower CCR"], lower, lower, row["CCR"], row["CCR after"])
    others = [
        t3[0][label] for label in ("Metis", "m-TOPO", "m-ETF", "m-SCT", "Order-Place") if "OOM" not in t3[0][label]
    ]
    ours = t3[0]["Celeritas"]
    if "OOM" in ours or not others:
        assert t3[0]["Celeritas vs best other"] == "-"
    else:
        best = min(others, key=lambda c: number(c)[0])
        ratio = number(best)[0] / number(ours)[0]
        check_ratio(t3[0]["Celeritas vs best other"], ratio - 1, ratio, best, ours, percent=True)
    t4 = find(
        found,
        "model",
        "nodes",
        "m-SCT wall (s)",
        "Order-Place wall (s)",
        "Celeritas wall (s)",
        "m-SCT vs Celeritas wall",
        "Celeritas step (ms)",
    )
    assert [row["model"] for row in t4] == ["squeezenet.onnx (largest)"]
    assert "## Do the paper's claims reproduce?" in text and "**squeezenet.onnx** (Table 3): Celeritas is" in text


def test_pesto_tables(quick_out: Path) -> None:
    found = tables((quick_out / "replicate_pesto.md").read_text())
    labels = ["Expert", "m-SCT", "m-SCT (coarse)", "Pesto ILP"]
    fig7 = find(
        found,
        "model",
        "nodes",
        "fits 1 GPU",
        *(f"{label} (ms)" for label in labels),
        "ILP status",
        "vs Expert",
        "vs m-SCT",
    )
    assert len(fig7) == 1 and fig7[0]["fits 1 GPU"] == "yes"
    for label in labels:
        assert NUMBER.match(fig7[0][f"{label} (ms)"])
    # Pesto's metric, recomputed from the printed makespans: 1 - ILP / baseline.
    ilp = fig7[0]["Pesto ILP (ms)"]
    for base in ("Expert", "m-SCT"):
        cell = fig7[0][f"{base} (ms)"]
        ratio = number(ilp)[0] / number(cell)[0]
        check_ratio(fig7[0][f"vs {base}"], 1 - ratio, ratio, ilp, cell, percent=True)
    assert fig7[0]["ILP status"].split(",")[0] in {"optimal", "feasible", "unknown"}
    t2 = find(found, "model", *(f"{label} wall (s)" for label in labels), "ILP vertices")
    assert len(t2) == 1 and int(t2[0]["ILP vertices"]) <= 12


def test_moirai_tables(quick_out: Path) -> None:
    found = tables((quick_out / "replicate_moirai.md").read_text())
    labels = ["m-SCT", "GETF-like", "HEFT", "Moirai ILP"]
    fig10 = find(
        found,
        "model",
        "cluster",
        "graph",
        "nodes",
        *(f"{label} (ms)" for label in labels),
        "ILP status",
        "vs m-SCT",
        "vs GETF-like",
    )
    assert [(row["cluster"], row["graph"]) for row in fig10] == [
        ("moirai-inter", "original"),
        ("moirai-inter", "coarsened"),
        ("moirai-intra", "original"),
        ("moirai-intra", "coarsened"),
    ]
    for row in fig10:
        assert re.match(r"^\d+\.\d\dx$", row["vs m-SCT"])
        # Moirai's metric, recomputed from the printed makespans: baseline / ILP.
        for base in ("m-SCT", "GETF-like"):
            cell, ilp = row[f"{base} (ms)"], row["Moirai ILP (ms)"]
            ratio = number(cell)[0] / number(ilp)[0]
            check_ratio(row[f"vs {base}"], ratio, ratio, cell, ilp)
    # The fusion rules shrink the graph the list schedulers see.
    assert int(fig10[1]["nodes"]) < int(fig10[0]["nodes"]) == 105
    t5 = find(found, "model", "cluster", "graph", *(f"{label} wall (s)" for label in labels))
    assert len(t5) == 4


def strip_variable(text: str) -> str:
    """Drop what may differ between runs: the generated-at line, every cell under a "wall" header, and
    the placement-time claim (a comparison of wall times, which flips on a loaded machine when the
    quick run's two times are close)."""
    out = []
    header: list[str] = []
    for line in text.splitlines():
        if line.startswith("Generated by") or line.startswith("- **Table 4 (placement time)"):
            continue
        if not line.startswith("|"):
            header = []
        elif not header:
            header = line.strip("|").strip().split(" | ")
        elif not line.startswith("|--") and not line.startswith("|---"):
            cells = line.strip("|").strip().split(" | ")
            line = " | ".join("T" if "wall" in h else c for h, c in zip(header, cells, strict=True))
        out.append(line)
    return "\n".join(out)


def test_celeritas_is_deterministic_apart_from_timing(tmp_path: Path) -> None:
    assert celeritas.main(["--quick", "--quiet", "--out", str(tmp_path / "a")]) == 0
    assert celeritas.main(["--quick", "--quiet", "--out", str(tmp_path / "b")]) == 0
    first = (tmp_path / "a" / "replicate_celeritas.md").read_text()
    second = (tmp_path / "b" / "replicate_celeritas.md").read_text()
    assert strip_variable(first) == strip_variable(second)


def test_bad_command_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--only=celeritas,bogus"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "python -m devtools.replicate: error: unknown paper 'bogus' in --only (known: celeritas, fastt, pesto, moirai)"
    ]
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert celeritas.main(["--quick", "--quiet", "--out", str(blocker)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"replicate celeritas: error: --out '{blocker}' is not a directory"]
    assert parse_only("moirai,celeritas") == ["celeritas", "moirai"]
