"""The pass reference, generated from the pass registry so that it cannot drift from the code.

Every built-in pass (a class registered by :func:`graphir.pass_infra.register_pass` from a module of
``graphir.passes``) is described by what the code already declares: its ``name``, the first line of
its docstring, its ``requires`` / ``provides`` facts, and each option's type and default as
``graphir-opt`` parses them (:func:`graphir.pass_infra.pass_options`). An option's help text is
the field's ``metadata["help"]`` when the dataclass field sets one, else its entry in the
``Options:`` section of the pass docstring (Google style; ``mem_cap`` or ``mem-cap``). An option
with neither is an error, so a new option cannot ship undocumented. A pass with a sub-registry of
algorithms (``place{algo=...}``: :data:`graphir.passes.place.PLACERS`, ``fuse{algo=...}``:
:data:`graphir.passes.fuse.FUSIONS`, ``profile{mode=...}``: :data:`graphir.passes.profile.MODES`)
also lists every algorithm with its first docstring line and its own options, documented the same
way (the same data ``graphir-opt --list-passes`` prints), under the pass's ``algorithm_kind``
(``Placement algorithms``, ``Profiling modes``).

Two outputs are generated: the full reference ``docs/passes.md`` and a short table in
``README.md`` between the markers ``<!-- passes:begin -->`` and ``<!-- passes:end -->``.
Passes loaded from plugins (entry points, ``--load-plugin``) are left out: the text depends only
on the checked-out code.

Command line (from the repository root)::

    python -m devtools.passdoc            # print docs/passes.md to stdout
    python -m devtools.passdoc --write    # rewrite docs/passes.md and the README section
    python -m devtools.passdoc --check    # exit 1 when either is stale
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from graphir.driver import load_builtin_passes
from graphir.pass_infra import Pass, format_option, pass_options

BEGIN_MARKER = "<!-- passes:begin -->"
END_MARKER = "<!-- passes:end -->"
REFERENCE_PATH = Path("docs") / "passes.md"
README_PATH = Path("README.md")
WRITE_COMMAND = "python -m devtools.passdoc --write"
_BUILTIN_PREFIX = "graphir.passes."


class PassDocError(Exception):
    """The registry or the files cannot be documented (reported as one line)."""


@dataclasses.dataclass(frozen=True)
class OptionDoc:
    """One option of a pass, as documented.

    Attributes:
        name: kebab-case name used in pipelines.
        type_text: the type as ``--list-passes`` shows it (``int``, ``list<str>``, ``a|b``).
        default: the default in pipeline syntax (``""`` for an empty string or list).
        help: one paragraph of help text.
    """

    name: str
    type_text: str
    default: str
    help: str


@dataclasses.dataclass(frozen=True)
class AlgorithmDoc:
    """One algorithm of a pass's sub-registry (``place{algo=ilp}``), as documented.

    Attributes:
        name: the selector's value.
        summary: first line of the class docstring.
        options: its own options in declaration order.
        module: the Python module defining it.
    """

    name: str
    summary: str
    options: tuple[OptionDoc, ...]
    module: str


@dataclasses.dataclass(frozen=True)
class PassDoc:
    """One registered pass, as documented.

    Attributes:
        name: pipeline name.
        summary: first line of the class docstring.
        requires: facts the pass needs.
        provides: facts the pass establishes.
        options: its options in declaration order.
        module: the Python module defining it.
        selector: the option choosing an algorithm (``algo``), empty for a plain pass.
        algorithms: its built-in algorithms, sorted by name.
        kind: what an algorithm is called (``placement algorithm``, ``profiling mode``).
    """

    name: str
    summary: str
    requires: tuple[str, ...]
    provides: tuple[str, ...]
    options: tuple[OptionDoc, ...]
    module: str
    selector: str = ""
    algorithms: tuple[AlgorithmDoc, ...] = ()
    kind: str = "algorithm"

    def kind_plural(self) -> str:
        """The heading of the algorithm list: ``Placement algorithms``, ``Profiling modes``."""
        text = self.kind or "algorithm"
        return text[0].upper() + text[1:] + "s"


# --------------------------------------------------------------------------- reading the registry


def docstring_options(cls: type) -> dict[str, str]:
    """The ``Options:`` section of a Google-style class docstring: field name -> help text.

    Entries are ``name: text`` lines one indentation step into the section; deeper-indented lines
    continue the previous entry. Names are returned in snake_case.
    """
    doc = inspect.getdoc(cls) or ""
    lines = doc.splitlines()
    out: dict[str, str] = {}
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Options:")
    except StopIteration:
        return out
    entry_indent: int | None = None
    current: str | None = None
    for line in lines[start + 1 :]:
        if not line.strip():
            current = None
            continue
        indent = len(line) - len(line.lstrip())
        if indent == 0:
            break  # the next section (``Attributes:``...) or prose
        if entry_indent is None:
            entry_indent = indent
        match = re.fullmatch(r"([A-Za-z_][\w-]*)\s*:\s*(.*)", line.strip())
        if indent == entry_indent and match:
            current = match.group(1).replace("-", "_")
            out[current] = markdown(match.group(2).strip())
        elif current is not None and indent > entry_indent:
            out[current] = markdown(f"{out[current]} {line.strip()}".strip())
    return out


def markdown(text: str) -> str:
    """Docstring markup as Markdown: RST double-backtick literals and Sphinx roles become single-backtick code."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", text)
    return re.sub(r"``([^`]+)``", r"`\1`", text)


def _summary(obj: Any) -> str:
    """The first docstring line, without a trailing 'Requires ...' / 'Provides ...' (shown apart)."""
    doc = (inspect.getdoc(obj) or "").strip()
    if not doc:
        return ""
    first = doc.splitlines()[0].strip()
    return re.sub(r"\s+(Requires|Provides)\b.*$", "", first)


def _document_options(cls: type, what: str) -> tuple[OptionDoc, ...]:
    """The options of pass or algorithm class ``cls`` with their help texts.

    Raises:
        PassDocError: an option has no help text (``what`` names the class in the message).
    """
    from_docstring = docstring_options(cls)
    fields = {field.name: field for field in dataclasses.fields(cls)}
    options: list[OptionDoc] = []
    for kebab, info in pass_options(cls).items():
        help_text = str(fields[info.field].metadata.get("help", "")) or from_docstring.get(info.field, "")
        if not help_text:
            raise PassDocError(
                f"option '{kebab}' of {what} has no help text: describe it in the 'Options:' "
                f"section of {cls.__module__}.{cls.__qualname__}'s docstring"
            )
        options.append(OptionDoc(kebab, info.type_text, format_option(info.default), help_text))
    return tuple(options)


def document_pass(cls: type[Pass]) -> PassDoc:
    """Describe one pass class and its built-in algorithms.

    Raises:
        PassDocError: the class or an algorithm has no docstring, or an option has no help text.
    """
    summary = markdown(_summary(cls))
    if not summary:
        raise PassDocError(f"pass '{cls.name}' ({cls.__module__}) has no docstring")
    options = _document_options(cls, f"pass '{cls.name}'")
    algorithms: list[AlgorithmDoc] = []
    selector = ""
    if cls.algorithms is not None:
        selector = cls.algorithm_selector.replace("_", "-")
        for name, algorithm in sorted(cls.algorithms.items()):
            if not algorithm.__module__.startswith(_BUILTIN_PREFIX):
                continue
            what = f"{cls.name}{{{selector}={name}}}"
            algo_summary = markdown(_summary(algorithm))
            if not algo_summary:
                raise PassDocError(f"{what} ({algorithm.__module__}.{algorithm.__qualname__}) has no docstring")
            algorithms.append(
                AlgorithmDoc(name, algo_summary, _document_options(algorithm, what), algorithm.__module__)
            )
    return PassDoc(
        cls.name,
        summary,
        tuple(cls.requires),
        tuple(cls.provides),
        options,
        cls.__module__,
        selector,
        tuple(algorithms),
        cls.algorithm_kind,
    )


def builtin_passes() -> list[PassDoc]:
    """Every built-in pass, sorted by name (plugins excluded)."""
    registry = load_builtin_passes()
    classes = [cls for cls in registry.values() if cls.__module__.startswith(_BUILTIN_PREFIX)]
    return [document_pass(cls) for cls in sorted(classes, key=lambda cls: cls.name)]


# --------------------------------------------------------------------------- rendering


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    """Inline code that survives a Markdown table (pipes escaped)."""
    return "`" + _cell(text) + "`"


def _facts(facts: tuple[str, ...]) -> str:
    return ", ".join(f"`{fact}`" for fact in facts) if facts else "—"


def _option_table(options: Sequence[OptionDoc]) -> list[str]:
    lines = ["| option | type | default | help |", "|---|---|---|---|"]
    for option in options:
        lines.append(
            f"| `{option.name}` | {_code(option.type_text)} | {_code(option.default)} | {_cell(option.help)} |"
        )
    return lines


def render_reference(passes: Sequence[PassDoc]) -> str:
    """The full reference page (``docs/passes.md``)."""
    lines = [
        "# Pass reference",
        "",
        f"<!-- Generated by `{WRITE_COMMAND}` from the pass registry; do not edit by hand. -->",
        "",
        "Every built-in pass of `graphir-opt --passes=...`, with the facts (annotation keys) it requires",
        "and provides and its options. Options are written `name=value` inside braces after the pass",
        "name (`fuse{algo=cpd-topo window=16}`); a list option takes comma-separated values",
        '(`dce{keep=tf.AssignVariableOp,tf.Print}`); `""` is the empty string or list. A missing',
        "required fact is produced by the first registered pass that provides it, with default options.",
        "",
        "| pass | requires | provides | summary |",
        "|---|---|---|---|",
    ]
    for doc in passes:
        lines.append(
            f"| [`{doc.name}`](#{doc.name}) | {_facts(doc.requires)} | {_facts(doc.provides)} | {_cell(doc.summary)} |"
        )
    for doc in passes:
        lines += ["", f"## {doc.name}", "", doc.summary, ""]
        lines.append(f"- requires: {_facts(doc.requires)}")
        lines.append(f"- provides: {_facts(doc.provides)}")
        lines.append(f"- defined in: `{doc.module}`")
        lines.append("")
        lines += _option_table(doc.options) if doc.options else ["No options."]
        if doc.algorithms:
            lines += ["", f"{doc.kind_plural()} (`{doc.selector}=`), each with its own options:", ""]
            lines += [f"| {doc.selector} | what it does | options (defaults) |", "|---|---|---|"]
            for algo in doc.algorithms:
                lines.append(f"| `{algo.name}` | {_cell(algo.summary)} | {_option_summary(algo.options)} |")
            for algo in doc.algorithms:
                if algo.options:
                    lines += ["", f"### {doc.name}{{{doc.selector}={algo.name}}}", "", algo.summary, ""]
                    lines.append(f"- defined in: `{algo.module}`")
                    lines += ["", *_option_table(algo.options)]
    return "\n".join(lines) + "\n"


def _option_summary(options: Sequence[OptionDoc]) -> str:
    return " ".join(_code(f"{option.name}={option.default}") for option in options) or "—"


def render_readme_section(passes: Sequence[PassDoc]) -> str:
    """The README's pass table (the text between the markers, markers excluded)."""
    lines = [
        f"<!-- Generated by `{WRITE_COMMAND}`; details in docs/passes.md. -->",
        "",
        "| pass | requires → provides | options (defaults) | summary |",
        "|---|---|---|---|",
    ]
    for doc in passes:
        facts = f"{_facts(doc.requires)} → {_facts(doc.provides)}"
        lines.append(f"| `{doc.name}` | {facts} | {_option_summary(doc.options)} | {_cell(doc.summary)} |")
    for doc in passes:
        if doc.algorithms:
            lines += [
                "",
                f"{doc.kind_plural()} of `{doc.name}` (`{doc.name}{{{doc.selector}=...}}`, options in docs/passes.md):",
                "",
            ]
            lines += [f"- `{algo.name}`: {algo.summary}" for algo in doc.algorithms]
    return "\n".join(lines) + "\n"


def splice_readme(readme: str, section: str) -> str:
    """``readme`` with the text between the pass markers replaced by ``section``.

    Raises:
        PassDocError: the markers are missing, repeated or out of order.
    """
    if readme.count(BEGIN_MARKER) != 1 or readme.count(END_MARKER) != 1:
        raise PassDocError(f"README.md needs exactly one '{BEGIN_MARKER}' and one '{END_MARKER}' line")
    head, rest = readme.split(BEGIN_MARKER)
    if END_MARKER not in rest:
        raise PassDocError(f"'{END_MARKER}' comes before '{BEGIN_MARKER}' in README.md")
    _, tail = rest.split(END_MARKER)
    return f"{head}{BEGIN_MARKER}\n{section}{END_MARKER}{tail}"


def expected_files(root: Path) -> dict[Path, str]:
    """The generated files under ``root`` and the text each should hold."""
    passes = builtin_passes()
    readme_path = root / README_PATH
    try:
        readme = readme_path.read_text()
    except OSError as exc:
        raise PassDocError(f"cannot read {readme_path}: {exc.strerror or exc}") from exc
    return {
        root / REFERENCE_PATH: render_reference(passes),
        readme_path: splice_readme(readme, render_readme_section(passes)),
    }


def stale_files(root: Path) -> list[Path]:
    """Generated files under ``root`` whose committed text differs from what the registry gives."""
    stale = []
    for path, text in expected_files(root).items():
        if not path.is_file() or path.read_text() != text:
            stale.append(path)
    return stale


def main(argv: Sequence[str] | None = None) -> int:
    """Print, write or check the pass reference."""
    parser = argparse.ArgumentParser(prog="passdoc", description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite docs/passes.md and the README's pass table")
    mode.add_argument("--check", action="store_true", help="exit 1 when docs/passes.md or the README table is stale")
    parser.add_argument("--root", type=Path, default=Path("."), help="repository root (default: the current directory)")
    args = parser.parse_args(argv)
    try:
        if args.write:
            for path, text in expected_files(args.root).items():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
            return 0
        if args.check:
            stale = stale_files(args.root)
            if stale:
                names = ", ".join(str(path) for path in stale)
                print(f"passdoc: error: {names} out of date: run `{WRITE_COMMAND}`", file=sys.stderr)
                return 1
            return 0
        sys.stdout.write(render_reference(builtin_passes()))
        return 0
    except PassDocError as exc:
        print(f"passdoc: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
