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

import ast
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
IMPORTED_PACKAGES = (
    "graphir",
    "graphir.importers",
    "graphir.passes",
    "graphir.backends",
    "graphir.driver",
    "graphir.tools",
)
TIMEOUT_S = 180
PRODUCT_TOOLS = (
    "__init__",
    "bench",  # graphir-bench: a placer-comparison matrix on the user's models
    "bench_matrix",
    "bench_run",
    "bench_tables",
    "calibrate_comm",  # a calibrated cluster TOML of the user's machine, for --cluster
    "demo",  # make demo's GPT training step
    "run_tf",  # a placed model run on TensorFlow (README)
    "tune",  # graphir-tune
    "tune_loop",
    "zoo",  # the model zoo and graphir-opt's zoo:<name> source
    "zoo_convert",
    "zoo_entries",
    "zoo_models",
    "zoo_source",
    "zoo_table",
)
"""The modules of ``tools/`` (``graphir.tools``): the product's command lines and what they import at run time.

A developer script (benchmark, generator, checker) goes in ``devtools/``, which is not installed; a new
module of ``tools/`` is added here only when it is part of the product.
"""
DEVTOOLS = REPO_ROOT / "devtools"


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


def _wheel_modules_from_pyproject() -> dict[str, Path]:
    """Module name -> source file of every module setuptools puts in the wheel (``packages`` x ``package-dir``)."""
    config = _setuptools_config()
    package_dir: dict[str, str] = config["package-dir"]
    modules: dict[str, Path] = {}
    for package in config["packages"]:
        mapped = max((p for p in package_dir if package == p or package.startswith(p + ".")), key=len)
        folder = REPO_ROOT / package_dir[mapped] / Path(*package[len(mapped) :].split(".")[1:])
        for path in sorted(folder.glob("*.py")):
            modules[f"{package}.{path.stem}"] = path
    return modules


def _developer_modules() -> set[str]:
    """Every module of ``devtools/`` as ``graphir.tools`` would have named it (``replicate.fastt``...)."""
    return {
        ".".join(path.relative_to(DEVTOOLS).with_suffix("").parts)
        for path in DEVTOOLS.rglob("*.py")
        if "__pycache__" not in path.parts and path.relative_to(DEVTOOLS).parts != ("__init__.py",)
    }


def test_the_wheel_package_list_holds_no_developer_script():
    """From pyproject.toml alone (fast): what the wheel would hold is the product, never devtools/."""
    modules = _wheel_modules_from_pyproject()
    assert not [m for m in _setuptools_config()["packages"] if "devtools" in m]
    assert not [name for name, path in modules.items() if DEVTOOLS in path.parents]
    tools = sorted(name.removeprefix("graphir.tools.") for name in modules if name.startswith("graphir.tools."))
    assert tools == sorted(PRODUCT_TOOLS), "tools/ holds the product only: move developer scripts to devtools/"
    assert not {f"graphir.tools.{name}" for name in _developer_modules()} & set(modules)


def test_the_product_never_imports_devtools():
    """The installed package runs without the checkout: no module of it imports ``devtools``."""
    offenders = []
    for name, path in _wheel_modules_from_pyproject().items():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                targets = [node.module or ""]
            else:
                continue
            offenders += [f"{name}:{node.lineno} {t}" for t in targets if t.split(".")[0] == "devtools"]
    assert not offenders


def test_the_built_wheel_holds_no_developer_script(wheel: Path):
    with zipfile.ZipFile(wheel) as archive:
        names = [name for name in archive.namelist() if name.endswith(".py")]
    assert not [name for name in names if name.startswith("devtools/")]
    tools = sorted(
        ".".join(Path(name).relative_to(f"{NAMESPACE}/tools").with_suffix("").parts)
        for name in names
        if name.startswith(f"{NAMESPACE}/tools/")
    )
    assert tools == sorted(PRODUCT_TOOLS), "the wheel's graphir.tools is the product only"
    assert not {f"{NAMESPACE}/tools/{name.replace('.', '/')}.py" for name in _developer_modules()} & set(names)
