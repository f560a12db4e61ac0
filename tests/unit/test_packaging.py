"""Packaging: the wheel installs every package under the `graphir` namespace, with `graphir-opt`.

The wheel is built offline (no build isolation, no index) from a copy of the sources, so the
work tree gets no `build/` or `*.egg-info` and stale files in an old `build/lib` cannot hide a
missing package. It is installed with `--no-deps` into a fresh venv that sees the current
environment's site-packages through a `.pth` file. (`venv --system-site-packages` would not do:
created from inside a venv such as `.venv`, it exposes the *base* interpreter's site-packages,
not the venv's.) The imports run from a directory outside the repository, because there the
local `graphir/` folder would shadow the installed package.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = REPO_ROOT / "pyproject.toml"
NAMESPACE = "graphir"
IMPORTED_PACKAGES = ("graphir", "graphir.importers", "graphir.passes", "graphir.backends", "graphir.tools")
TIMEOUT_S = 180


def _pyproject() -> dict:
    with PYPROJECT.open("rb") as f:
        return tomllib.load(f)


def _setuptools_config() -> dict:
    return _pyproject()["tool"]["setuptools"]


def _quiet_pip_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INDEX="1", PIP_NO_INPUT="1")
    return env


def _run(cmd: list[str | os.PathLike[str]], **kwargs) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, timeout=TIMEOUT_S, check=False, **kwargs
    )
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_every_package_folder_is_listed_in_pyproject():
    """A folder of Python modules under a mapped root that is not in `packages` is left out of the wheel."""
    config = _setuptools_config()
    package_dir: dict[str, str] = config["package-dir"]
    listed = set(config["packages"])

    found = set()
    for package, folder in package_dir.items():
        root = REPO_ROOT / folder
        for module in root.rglob("*.py"):
            relative = module.parent.relative_to(root)
            if any(part.startswith(".") or part == "__pycache__" for part in relative.parts):
                continue
            found.add(".".join((package, *relative.parts)))

    missing = sorted(found - listed)
    assert not missing, f'add {missing} to [tool.setuptools] "packages" in pyproject.toml'
    for package in sorted(listed):
        assert package == NAMESPACE or package.startswith(NAMESPACE + "."), package


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the wheel offline from a copy of the sources."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    source.mkdir()
    shutil.copy2(PYPROJECT, source)
    for extra in ("README.md", "LICENSE", "MANIFEST.in", "setup.py"):
        if (REPO_ROOT / extra).exists():
            shutil.copy2(REPO_ROOT / extra, source)
    top_folders = {Path(folder).parts[0] for folder in _setuptools_config()["package-dir"].values()}
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "Output")  # the wheel compiles its own
    for folder in sorted(top_folders):
        shutil.copytree(REPO_ROOT / folder, source / folder, ignore=ignore)

    out = tmp / "dist"
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", out, source],
        env=_quiet_pip_env(),
        cwd=tmp,
    )
    (built,) = out.glob("graphir-*.whl")
    return built


@pytest.fixture(scope="module")
def installed_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed and the current environment's packages visible."""
    venv_dir = tmp_path_factory.mktemp("venv") / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv_dir])
    venv_python = venv_dir / "bin" / "python"
    # Dependencies come from the running environment: no network.
    site_dirs = dict.fromkeys([sysconfig.get_path("purelib"), sysconfig.get_path("platlib")])
    venv_site = _run([venv_python, "-I", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout.strip()
    Path(venv_site, "_graphir_test_deps.pth").write_text("\n".join(site_dirs) + "\n")
    _run(
        [sys.executable, "-m", "pip", "--python", venv_python, "install", "--no-deps", wheel],
        env=_quiet_pip_env(),
    )
    return venv_dir


def test_wheel_holds_only_the_graphir_namespace(wheel: Path):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    top_level = {name.split("/", 1)[0] for name in names}
    dist_info = f"graphir-{_pyproject()['project']['version']}.dist-info"
    assert top_level == {NAMESPACE, dist_info}, sorted(top_level)
    for package in IMPORTED_PACKAGES:
        assert package.replace(".", "/") + "/__init__.py" in names, package
    # setup.py's C module (the reader's compiled loop), built for this interpreter.
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    assert f"{NAMESPACE}/_girtext{suffix}" in names, sorted(name for name in names if "_girtext" in name)


def test_installed_packages_import_outside_the_repo(installed_venv: Path, tmp_path: Path):
    code = (
        "import json, sys\n"
        f"import {', '.join(IMPORTED_PACKAGES)}\n"
        "print(json.dumps({\n"
        f"    'files': {{m: sys.modules[m].__file__ for m in {list(IMPORTED_PACKAGES)!r}}},\n"
        "    'tensorflow': sorted(m for m in sys.modules if m.split('.')[0] == 'tensorflow'),\n"
        "}))\n"
    )
    # -I: ignore PYTHON* variables and the user site, and do not put the cwd on sys.path.
    proc = _run([installed_venv / "bin" / "python", "-I", "-c", code], cwd=tmp_path)
    result = json.loads(proc.stdout)

    venv_root = installed_venv.resolve()
    for module, file in result["files"].items():
        assert venv_root in Path(file).resolve().parents, f"{module} imported from {file}, not the installed wheel"
    assert result["tensorflow"] == [], "import graphir must not import tensorflow (it is imported lazily)"


def test_console_script_is_installed(installed_venv: Path):
    script = installed_venv / "bin" / "graphir-opt"
    assert script.is_file()
    assert os.access(script, os.X_OK)
    assert "graphir.driver" in script.read_text()
