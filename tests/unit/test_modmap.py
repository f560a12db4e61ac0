"""The module map (docs/modules.md) and the README's layout section match the tree."""

from __future__ import annotations

import re
from pathlib import Path

from devtools.modmap import MAP_PATH, WRITE_COMMAND, render

ROOT = Path(__file__).resolve().parents[2]


def test_module_map_is_current():
    assert (ROOT / MAP_PATH).read_text() == render(ROOT), f"{MAP_PATH} is stale: run {WRITE_COMMAND}"


def test_module_map_lists_every_module_once():
    text = render(ROOT)
    listed = re.findall(r"^\| `[^`]+` \| `([^`]+)` \|", text, flags=re.M)
    on_disk = sorted(
        p.relative_to(ROOT).as_posix()
        for folder in ("graphir", "passes", "backends", "driver", "tools", "devtools")
        for p in (ROOT / folder).rglob("*.py")
        if "__pycache__" not in p.parts
    )
    assert sorted(listed) == on_disk


def test_readme_layout_names_every_package_folder():
    readme = (ROOT / "README.md").read_text()
    layout = readme.split("## Layout", 1)[1].split("\n## ", 1)[0]
    packages = sorted(
        p.parent.relative_to(ROOT).as_posix()
        for folder in ("graphir", "passes", "backends", "driver", "tools")
        for p in (ROOT / folder).rglob("__init__.py")
    )
    missing = [folder for folder in packages if f"{folder}/" not in layout and f"{Path(folder).name}/" not in layout]
    assert not missing, f"README's Layout section does not name {missing}"
