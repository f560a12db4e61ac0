"""The op reference ``docs/ops.md``, generated from the op registry (:mod:`graphir.ops`) so it cannot drift.

One table per op family module, one row per op kind registered there: its type rule, its cost
model, the dimensions its split rule supports and whether it lowers to TensorFlow. Each cell is the
first line of the facet function's docstring (a facet without one is an error, so a new op cannot
ship undocumented). A qualified op's cost cell says so when the cost comes from its bare op type
(``onnx.Relu`` -> ``Relu``), as :func:`graphir.ops.cost_of` resolves it. Op kinds that only have a
cost (TensorFlow training ops, shared op types) are listed compactly, grouped by estimator.

Command line (from the repository root)::

    python -m devtools.opdoc            # print docs/ops.md to stdout
    python -m devtools.opdoc --write    # rewrite docs/ops.md
    python -m devtools.opdoc --check    # exit 1 when it is stale
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from graphir.ops import OPS, OpDef, bare_op, cost_of

REFERENCE_PATH = Path("docs") / "ops.md"
WRITE_COMMAND = "python -m devtools.opdoc --write"


class OpDocError(Exception):
    """A facet function has no docstring."""


def _summary(fn: Any, what: str) -> str:
    doc = (getattr(fn, "__doc__", None) or "").strip()
    if not doc:
        raise OpDocError(f"the {what} {getattr(fn, '__qualname__', fn)!r} has no docstring")
    return " ".join(doc.split("\n\n", 1)[0].split())


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _family(fn: Any) -> str:
    return getattr(fn, "__module__", "?").rsplit(".", 1)[-1]


def _cost_cell(definition: OpDef) -> str:
    estimator = cost_of(definition.name)
    if estimator is None:
        return "bytes-only fallback"
    text = _summary(estimator, f"cost of {definition.name}")
    if definition.cost is None:
        text += f" (as `{bare_op(definition.name)}`)"
    return text


def _row(definition: OpDef) -> str:
    type_rule = _summary(definition.type_rule, f"type rule of {definition.name}") if definition.type_rule else "—"
    split = ", ".join(definition.split.dims) if definition.split is not None else "—"
    lower = "yes" if definition.lower is not None else "—"
    cells = [f"`{definition.name}`", type_rule, _cost_cell(definition), split, lower]
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def render() -> str:
    """The text of ``docs/ops.md`` for the op kinds registered now (built-ins only, in name order)."""
    full: dict[str, list[OpDef]] = defaultdict(list)
    cost_only: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for name in sorted(OPS):
        definition = OPS[name]
        facets = [definition.type_rule, definition.split, definition.lower]
        if any(f is not None for f in facets):
            anchor = definition.lower or definition.type_rule or (definition.split.plan if definition.split else None)
            full[_family(anchor)].append(definition)
        elif definition.cost is not None:
            summary = _summary(definition.cost, f"cost of {name}")
            cost_only[_family(definition.cost)][summary].append(name)
    lines = [
        "# Op reference",
        "",
        f"Generated from the op registry (`graphir/ops/`) by `{WRITE_COMMAND}`; do not edit by hand.",
        "",
        "Per op kind: the **type rule** the verifier checks, the **cost** model of `profile{mode=analytical}`",
        "(FLOPs and bytes, fed to the roofline), the dimensions FastT operation **splitting** supports, and",
        "whether the op **lowers** to TensorFlow. A qualified op (`onnx.Relu`) takes its cost from its bare",
        "op type (`Relu`, shared by every dialect) unless it defines its own; ops without a cost model use",
        "the bytes-only fallback (bytes in + out, one FLOP per output element).",
        "",
    ]
    families = sorted(set(full) | set(cost_only))
    for family in families:
        title = "Shared estimators (`graphir.ops.work`), registered by the families" if family == "work" else None
        lines += [f"## {title or f'`graphir.ops.{family}`'}", ""]
        if full.get(family):
            lines += ["| op | type rule | cost | split | lowering |", "|---|---|---|---|---|"]
            lines += [_row(d) for d in full[family]]
            lines.append("")
        if cost_only.get(family):
            lines += ["Cost only (every dialect unless qualified):", ""]
            for summary, names in sorted(cost_only[family].items()):
                lines.append(f"* {_cell(summary)} {', '.join(f'`{n}`' for n in names)}")
            lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def stale(root: Path) -> bool:
    """True when ``root/docs/ops.md`` differs from :func:`render`."""
    path = root / REFERENCE_PATH
    return not path.exists() or path.read_text() != render()


def main(argv: Sequence[str] | None = None) -> int:
    """Print, write or check ``docs/ops.md``; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m devtools.opdoc", description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite docs/ops.md")
    mode.add_argument("--check", action="store_true", help="exit 1 when docs/ops.md is stale")
    args = parser.parse_args(argv)
    root = Path.cwd()
    if args.write:
        (root / REFERENCE_PATH).write_text(render())
        return 0
    if args.check:
        if stale(root):
            print(f"{REFERENCE_PATH} is out of date: run `{WRITE_COMMAND}`", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
