"""The module map (``docs/modules.md``), generated from the tree so that it cannot drift from the code.

One row per Python module of the installed package, in the layer it belongs to (the same layers
``make lint`` enforces: tools, driver, passes, backends, the IR core), then the developer tools of
``devtools/`` (not installed), with the first line of the module's docstring. The modules are
read as text (``ast``), never imported, so the map lists the tree as checked out, optional
extras or not.

Command line (from the repository root)::

    python -m devtools.modmap            # print docs/modules.md to stdout
    python -m devtools.modmap --write    # rewrite docs/modules.md
    python -m devtools.modmap --check    # exit 1 when it is stale
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Sequence
from pathlib import Path

from devtools.importcycles import package_modules

MAP_PATH = Path("docs") / "modules.md"
WRITE_COMMAND = "python -m devtools.modmap --write"

LAYERS = (
    ("graphir.tools", "tools", "Tools: the installed command lines (graphir-bench, graphir-tune, the zoo, the demo)"),
    (
        "graphir.driver",
        "driver",
        "Driver: graphir-opt, the built-in passes and emitters, cluster resolution from files and this machine",
    ),
    ("graphir.passes", "passes", "Passes: the algorithms (profiling, fusion, placement, rewrites)"),
    ("graphir.backends", "backends", "Backends: emitters, reports, TensorFlow lowering and measurement"),
    ("graphir", "graphir", "The IR core: IR, text format, verifier, pass infrastructure, cluster, links, simulator"),
)
"""(package, source folder, heading), from the top layer down; the core is every other module of ``graphir``."""

DEVTOOLS = ("devtools", "devtools", "Developer tools (`devtools/`, not installed): benchmarks, fuzzing, doc generators")
"""The section after the layers: run from the checkout as ``python -m devtools.NAME``, never in the wheel."""


def _summary(path: Path) -> str:
    """The first line of the module docstring (``-`` when there is none)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    doc = ast.get_docstring(tree)
    if not doc:
        return "-"
    return doc.strip().splitlines()[0].replace("|", "\\|")


def _modules(package: str, root: Path, folder: Path) -> list[tuple[str, str, str]]:
    """``(module, path, summary)`` for every ``.py`` file below ``folder`` (the core skips the upper layers)."""
    return [
        (name, path.relative_to(root).as_posix(), _summary(path))
        for name, path in package_modules(package, folder).items()
    ]


def render(root: Path) -> str:
    """The whole ``docs/modules.md`` text for the tree at ``root``."""
    lines = [
        "# Module map",
        "",
        f"Generated from the tree by `{WRITE_COMMAND}` (a test fails when it is stale). Layers from the",
        "top down: a module may import the layers below its own, never above (`make lint` checks it with",
        "import-linter; see `pyproject.toml`).",
        "",
    ]
    for package, folder, heading in (*LAYERS, DEVTOOLS):
        lines += [f"## {heading}", "", "| module | file | what it holds |", "|---|---|---|"]
        for name, path, summary in _modules(package, root, root / folder):
            lines.append(f"| `{name}` | `{path}` | {summary} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Print, write or check ``docs/modules.md``."""
    parser = argparse.ArgumentParser(prog="python -m devtools.modmap", description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite docs/modules.md")
    mode.add_argument("--check", action="store_true", help="exit 1 when docs/modules.md is stale")
    args = parser.parse_args(argv)
    root = Path.cwd()
    text = render(root)
    if args.write:
        (root / MAP_PATH).write_text(text)
        return 0
    if args.check:
        current = (root / MAP_PATH).read_text() if (root / MAP_PATH).exists() else ""
        if current != text:
            print(f"{MAP_PATH} is stale: run {WRITE_COMMAND}", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
