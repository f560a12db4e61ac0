"""The model zoo's size table (``benchmarks/results/zoo.md``): per-entry graph statistics and the Markdown writer."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from graphir.tools.zoo_entries import ENTRIES


def entry_stats(name: str, directory: Path | None = None) -> dict[str, Any]:
    """Import a built entry and count its nodes, edges, control edges and parameter bytes."""
    from graphir.importers import load_module
    from graphir.importers.tf import persistent_bytes

    path = ENTRIES[name].path(directory)
    module = load_module(path)
    index = module.graph.index()
    params = sum(v.nbytes for v in module.graph.constants) + sum(persistent_bytes(n) for n in module.graph.nodes)
    return {
        "name": name,
        "nodes": index.num_nodes,
        "edges": index.num_edges,
        "control": int(index.edge_control.sum()),
        "param_mib": params / 2**20,
        "file_mib": sum(p.stat().st_size for p in ENTRIES[name].files(directory)) / 2**20,
    }


TABLE_NOTES = (
    "Notes:",
    "",
    "- *nodes* = IR nodes. For training graphs (TF GraphDef of one step, function calls inlined) this is",
    "  the TF op count after inlining minus the `Const` ops of more than 16 elements, which become graph",
    "  constants like ONNX initializers (tested in `tests/unit/test_zoo.py`). For inference entries it is",
    "  the ONNX node count.",
    "- *file* counts the model file plus its external data file (`<name>.onnx.data`) where there is one:",
    "  `vgg19_infer`, `transformer_infer`, `bert_large_infer` and `gpt_infer` keep their weights as ONNX",
    "  external data and are converted with the weights as function arguments (Keras `stateless_call`),",
    "  then attached as initializers with weight-only ops folded. tf2onnx's usual frozen conversion needs",
    "  about ten times the weight bytes of memory (15-20 GiB for BERT-large and the Transformer), more than",
    "  this 24 GiB machine can spare; the architectures are unchanged. On a 1-layer GPT the result computes",
    "  the same numbers as the frozen conversion, with a few percent more nodes (tf2onnx fuses some",
    "  constant `Mul`/`Add` chains only in frozen graphs).",
    "- GELU is the tanh approximation (GPT-2/BERT): the exact form needs `Erfc`, which tf2onnx cannot",
    "  convert. Position embeddings are a learned `(seq, d_model)` table. Dropout 0.1 in attention models.",
    "- The Transformer is an encoder-decoder with 16+16 layers, d_model 1024, 16 heads, d_ff 2048,",
    "  vocabulary 32000, sequence 64, batch 256 (Celeritas's batch, layers chosen to reach its 20k+ op",
    "  training graph). BERT-large: 24 layers, hidden 1024, 16 heads, d_ff 4096, sequence 128. GPT:",
    "  GPT-2 small, 12 layers, hidden 768, 12 heads, sequence 256.",
)

TIMING_PREFIX = "Build of the whole zoo from scratch:"

_ROW = re.compile(r"^\| `([A-Za-z0-9_]+)` \|")
"""A row of the table: its entry name."""


def write_table(rows: list[dict[str, Any]], path: Path, build_seconds: float | None) -> None:
    """Write the Markdown size table of the zoo.

    The rows of entries not in ``rows`` are kept as the existing file has them (measured by an
    earlier run), so building some entries (``zoo.py NAME ... --table``) updates or adds their rows
    and drops no other; rows of names no longer in :data:`ENTRIES` go. Rows are sorted by entry name.

    Args:
        rows: :func:`entry_stats` of the entries measured now.
        path: the Markdown file.
        build_seconds: the time of a build of every entry from scratch; ``None`` keeps the timing
            paragraph of the existing file (a run that built nothing does not measure a build).
    """
    timing: str | None = None
    old_lines = path.read_text().splitlines() if path.is_file() else []
    if build_seconds is not None:
        timing = f"{TIMING_PREFIX} {build_seconds:.0f} s of `make zoo` on this machine ({os.cpu_count()} cores)."
    else:  # the existing timing paragraph, up to its blank line (it may carry notes on later entries)
        start = next((k for k, line in enumerate(old_lines) if line.startswith(TIMING_PREFIX)), None)
        if start is not None:
            end = next((k for k in range(start, len(old_lines)) if not old_lines[k].strip()), len(old_lines))
            timing = "\n".join(old_lines[start:end])
    table: dict[str, str] = {}
    for line in old_lines:
        match = _ROW.match(line)
        if match and match.group(1) in ENTRIES:
            table[match.group(1)] = line
    for row in rows:
        entry = ENTRIES[row["name"]]
        table[row["name"]] = (
            f"| `{row['name']}` | {entry.batch} | {row['nodes']} | {row['edges']} | {row['control']} "
            f"| {row['param_mib']:.1f} | {row['file_mib']:.1f} | {entry.note} |"
        )
    lines = [
        "# Model zoo sizes",
        "",
        "Written by `make zoo` (`python tools/zoo.py --table benchmarks/results/zoo.md`). Nodes and edges are",
        "those of the imported graphir graph (`graph.index()`): edges count one per (producer, consumer, value)",
        "plus zero-byte control edges (column *control*). Parameters: constant bytes (ONNX) or variable bytes",
        "(`VarHandleOp` dtype x shape, Adam slots included, for training graphs).",
        "",
    ]
    if timing is not None:
        lines += [timing, ""]
    lines += [
        "| entry | batch | nodes | edges | control | params (MiB) | file (MiB) | configuration |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    lines += [table[name] for name in sorted(table)]
    lines += ["", *TABLE_NOTES]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
