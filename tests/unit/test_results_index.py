"""benchmarks/results: one current page per benchmark, every file in the index, every reference to it current."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
INDEX = RESULTS / "README.md"
DATED = re.compile(r"(^|[-_])(\d{4}|\d{4}-\d{2}-\d{2}|\d{8})(?=[-_.]|$)|-(quiet|loaded)(?=[-_.]|$)")
"""A run's time or date in a file name (``fidelity-quiet-0344.md``): a dated copy, which belongs in git history."""
REFERENCE = re.compile(r"(?<![:\w])benchmarks/results/([A-Za-z0-9_.*{},-]+)")
"""A path to a result; not ``REV:benchmarks/results/...`` (a file in git history, named for ``git show``)."""
CHECKED = ("Makefile", "README.md", "docs/", "devtools/", "tests/", "benchmarks/")
"""Where a reference must name a current file (tools/ only shows example output paths of graphir-bench)."""


def _files() -> list[str]:
    return sorted(path.name for path in RESULTS.iterdir() if path.is_file() and path.name != "README.md")


def _index_names() -> set[str]:
    """Every file name the index mentions, as a link or in backquotes."""
    found = re.findall(r"`([^`/ ]+\.(?:md|json|png))`|\]\(([^)#/ ]+)\)", INDEX.read_text())
    return {name for pair in found for name in pair if name}


def _exists(reference: str) -> bool:
    """A path under benchmarks/results: a file, a ``PATH`` stem of ``PATH.md``, a glob or ``{md,json}`` set."""
    name = reference.rstrip(".,;:)`'\"")
    if not name:
        return True  # the folder itself
    if "{" in name:
        head, _, rest = name.partition("{")
        options, _, tail = rest.partition("}")
        return all(_exists(head + option + tail) for option in options.split(","))
    if "*" in name:
        return any(RESULTS.glob(name))
    return (RESULTS / name).exists() or (RESULTS / f"{name}.md").exists()


def test_no_dated_copies():
    dated = [name for name in _files() if DATED.search(Path(name).stem)]
    assert not dated, f"dated copies belong in git history, not benchmarks/results: {dated}"


def test_the_index_lists_every_file_and_nothing_else():
    names = _index_names()
    missing = [name for name in _files() if name not in names]
    assert not missing, f"benchmarks/results/README.md does not describe {missing}"
    stale = sorted(name for name in names if not (RESULTS / name).exists())
    assert not stale, f"benchmarks/results/README.md names files that are not there: {stale}"


def test_every_reference_to_a_result_is_current():
    """The Makefile, docs, tools, tests and pages name only files that exist (the current page)."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    broken = []
    for name in tracked:
        path = ROOT / name
        if not name.startswith(CHECKED) or path.suffix not in (".md", ".py", ".toml", "") or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        broken += [f"{name}: {m.group(1)}" for m in REFERENCE.finditer(text) if not _exists(m.group(1))]
        if path.parent == RESULTS and path.suffix == ".md":
            links = re.findall(r"\]\(([^)#:]+)\)", text)
            broken += [f"{name}: link {link}" for link in links if not (RESULTS / link).exists()]
    assert not broken, broken
