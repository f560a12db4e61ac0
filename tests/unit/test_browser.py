"""The report page and the comparison page in a real browser (headless Chromium).

Each page is loaded by ``chromium --headless``; the test checks that the browser logged no console
error (a control page with a deliberate ``console.error`` proves the check can fail), that the
rendered DOM (``--dump-dom``) holds the timeline SVG with its bars and the memory bars, and keeps a
screenshot of each page under ``build/browser/`` for a human to look at.

Chromium is Debian's ``chromium`` package: ``make test`` installs it when it is missing and the user
is root (the Makefile's ``browser`` step); otherwise this module skips with one line saying how to
get it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHOTS = REPO / "build" / "browser"
VENV_BIN = Path(sys.executable).parent
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CONSOLE_ERROR = re.compile(r"CONSOLE[:(]\d+\)?\].*|Uncaught .*|Failed to load resource.*")

FORK = """
module @fork {cluster = "2xV100"} {
  graph @g(%x : f32[4]) {
    %a = onnx.Relu(%x) : (f32[4]) -> f32[4] [cost = 1ms, mem = {persistent = 3GiB}]
    %b = onnx.Relu(%a) : (f32[4]) -> f32[4] [cost = 2ms, mem = {persistent = 3GiB}]
    %c = onnx.Relu(%a) : (f32[4]) -> f32[4] [cost = 2ms, mem = {persistent = 3GiB}]
    %d = onnx.Relu(%b) : (f32[4]) -> f32[4] [cost = 1ms, mem = {persistent = 3GiB}]
    %e = onnx.Relu(%c) : (f32[4]) -> f32[4] [cost = 1ms, mem = {persistent = 3GiB}]
    %f = onnx.Add(%d, %e) : (f32[4], f32[4]) -> f32[4] [cost = 1ms, mem = {persistent = 3GiB}]
    return %f
  }
}
"""


def _browser() -> str:
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("headless Chromium not found: `make test` installs it as root, or run `sudo apt-get install chromium`")


@pytest.fixture(scope="module")
def browser() -> str:
    return _browser()


def _chromium(browser: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [
        browser,
        "--headless",
        "--no-sandbox",  # root in a container has no user namespace for the sandbox
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        "--window-size=1100,1400",
        "--virtual-time-budget=2000",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def render(browser: str, page: Path, shot: Path, tmp_path: Path) -> tuple[str, list[str]]:
    """The rendered DOM of ``page`` and the console errors Chromium logged; writes a screenshot to ``shot``."""
    url = page.resolve().as_uri()
    dumped = _chromium(browser, tmp_path / "profile-dom", "--dump-dom", url)
    assert dumped.returncode == 0, f"chromium failed on {page}:\n{dumped.stderr[-2000:]}"
    shot.parent.mkdir(parents=True, exist_ok=True)
    pictured = _chromium(browser, tmp_path / "profile-shot", f"--screenshot={shot}", url)
    assert pictured.returncode == 0 and shot.is_file() and shot.stat().st_size > 1000, pictured.stderr[-2000:]
    errors = [m.group(0) for log in (dumped.stderr, pictured.stderr) for m in CONSOLE_ERROR.finditer(log)]
    return dumped.stdout, errors


def _graphir_opt(*args: str) -> None:
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    subprocess.run([str(VENV_BIN / "graphir-opt"), *args], cwd=REPO, env=env, check=True, capture_output=True)


def test_console_check_catches_an_error(browser, tmp_path):
    page = tmp_path / "broken.html"
    page.write_text('<!DOCTYPE html><html><body><p>x</p><script>console.error("graphir-broken")</script></body></html>')
    dom, errors = render(browser, page, tmp_path / "broken.png", tmp_path)
    assert "<p>x</p>" in dom
    assert any("graphir-broken" in error for error in errors), errors


def test_report_page_renders_without_errors(browser, tmp_path):
    out = tmp_path / "report"
    _graphir_opt(
        "examples/mlp.gir",
        "--cluster=examples/cluster.toml",
        "--passes=place{algo=heft},simulate",
        "--emit=report",
        "-o",
        f"{out}/",
    )
    dom, errors = render(browser, out / "report.html", SHOTS / "report.png", tmp_path)
    assert errors == []
    timeline = re.search(r'<section id="timeline">.*?</section>', dom, re.DOTALL)
    assert timeline and "<svg" in timeline.group(0)
    assert len(re.findall(r"<rect\b", timeline.group(0))) >= 3  # one bar per node at least
    memory = re.search(r'<section id="memory">.*?</section>', dom, re.DOTALL)
    assert memory and len(re.findall(r'class="mem-row', memory.group(0))) == 3  # gpu0, gpu1, cpu0


def test_comparison_page_renders_without_errors(browser, tmp_path):
    model = tmp_path / "fork.gir"
    model.write_text(FORK)
    out = tmp_path / "compare"
    _graphir_opt(str(model), "--compare=single,m-etf,heft", "-o", f"{out}/")
    dom, errors = render(browser, out / "compare.html", SHOTS / "compare.png", tmp_path)
    assert errors == []
    assert len(re.findall(r'<tr data-algo="', dom)) == 3
    assert re.search(r'<tr data-algo="single" data-status="oom" class="oom">', dom)
    makespan = re.search(r'<section id="makespan">.*?</section>', dom, re.DOTALL)
    assert makespan and len(re.findall(r'class="bar"', makespan.group(0))) == 3
    memory = re.search(r'<section id="memory">.*?</section>', dom, re.DOTALL)
    assert memory and len(re.findall(r"data-capacity=", memory.group(0))) == 6  # 3 placers x 2 devices
