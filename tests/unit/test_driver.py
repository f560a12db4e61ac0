"""``graphir-opt``: exit codes, one-line errors, atomic output, split input, listings, plugins."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest
from helpers import random_module

from graphir.driver import run
from graphir.pass_infra import Pass, PassResult, register_pass
from graphir.printer import print_module

OK_GIR = """\
module @m {cluster = "2xV100"} {
  graph @main(%x : f32[2,3]) {
    const %w : f32[3,4] = external
    %y = onnx.MatMul(%x, %w) : (f32[2,3], f32[3,4]) -> f32[2,4]
    %z = onnx.Relu(%y) : (f32[2,4]) -> f32[2,4]
    %dead = onnx.Relu(%y) : (f32[2,4]) -> f32[2,4]
    return %z
  }
}
"""

CYCLIC_GIR = """\
module @m {
  graph @main(%x : f32[2]) {
    %a = onnx.Add(%x, %b) : (f32[2], f32[2]) -> f32[2]
    %b = onnx.Relu(%a) : (f32[2]) -> f32[2]
    return %b
  }
}
"""


@pytest.fixture
def files(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ok.gir").write_text(OK_GIR)
    (tmp_path / "cyc.gir").write_text(CYCLIC_GIR)
    (tmp_path / "bad.gir").write_text("garbage here\n")
    (tmp_path / "model.txt").write_text("x\n")
    return tmp_path


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = run(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_error(err: str) -> str:
    """The first stderr line, checking that no traceback was printed."""
    assert "Traceback" not in err
    return err.splitlines()[0]


# ----------------------------------------------------------------------------- user errors


def test_success_prints_the_module(files, capsys):
    code, out, err = cli(capsys, "ok.gir")
    assert (code, err) == (0, "")
    assert out == OK_GIR


def test_missing_file(files, capsys):
    code, out, err = cli(capsys, "missing.gir")
    assert code == 1 and out == ""
    assert err == "error: 'missing.gir': no such file\n"


def test_unknown_suffix(files, capsys):
    code, out, err = cli(capsys, "model.txt")
    assert code == 1 and out == ""
    assert one_error(err).startswith("error: 'model.txt': unknown input kind '.txt' (known: .gir, .onnx")


def test_corrupt_gir(files, capsys):
    code, out, err = cli(capsys, "bad.gir")
    assert code == 1 and out == ""
    assert one_error(err) == "bad.gir:1:1: error: expected 'module', found 'garbage'"
    assert err.splitlines()[1:3] == ["garbage here", "^"]


def test_cyclic_gir_names_the_cycle(files, capsys):
    code, out, err = cli(capsys, "cyc.gir")
    assert code == 1 and out == ""
    assert one_error(err) == "cyc.gir:3:5: error: graph 'main' has a cycle: a -> b -> a"


def test_cyclic_gir_without_verifier_still_fails_cleanly(files, capsys):
    code, out, err = cli(capsys, "cyc.gir", "--no-verify")
    assert code == 1 and out == ""
    assert "has a cycle: a -> b -> a" in one_error(err)


def test_unknown_pass(files, capsys):
    code, out, err = cli(capsys, "ok.gir", "--passes=dce,nope")
    assert code == 1 and out == ""
    first = one_error(err)
    assert first.startswith("<pipeline>:1:5: error: unknown pass 'nope' (known passes: ")
    assert "dce" in first and "critical-path" in first
    assert err.splitlines()[1:3] == ["dce,nope", "    ^"]


def test_unknown_option(files, capsys):
    code, out, err = cli(capsys, "ok.gir", "--passes=dce{foo=1}")
    assert code == 1 and out == ""
    assert (
        one_error(err) == "<pipeline>:1:5: error: unknown option 'foo' for pass 'dce' (options: keep, prune-constants)"
    )


def test_bad_option_value(files, capsys):
    code, _, err = cli(capsys, "ok.gir", "--passes=dce{prune-constants=perhaps}")
    assert code == 1
    assert one_error(err).startswith("<pipeline>:1:21: error: bad value 'perhaps' for option 'prune-constants'")


def test_pipeline_errors_are_reported_before_reading_the_input(files, capsys):
    code, _, err = cli(capsys, "missing.gir", "--passes=nope")
    assert code == 1 and "unknown pass 'nope'" in one_error(err)


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("3xFOO", "error: unknown cluster '3xFOO': expected NxKIND[-pcie|-nvlink]"),
        ("0xV100", "error: cluster '0xV100' has no devices"),
        ("nowhere.toml", "error: cluster file 'nowhere.toml' does not exist"),
    ],
)
def test_bad_cluster(files, capsys, spec, fragment):
    code, out, err = cli(capsys, "ok.gir", f"--cluster={spec}")
    assert code == 1 and out == ""
    assert one_error(err).startswith(fragment)


def test_bad_cluster_file_contents(files, capsys):
    (files / "c.toml").write_text("[[device]]\nkind = 'V100'\n")
    code, _, err = cli(capsys, "ok.gir", "--cluster=c.toml", "--emit=json")
    assert code == 1
    assert one_error(err) == "error: c.toml: device #0: missing key 'name'"


def test_bad_cluster_in_module_header(files, capsys):
    (files / "h.gir").write_text(OK_GIR.replace('"2xV100"', '"lots-of-gpus"'))
    code, _, err = cli(capsys, "h.gir", "--emit=json")
    assert code == 1
    assert one_error(err).startswith("error: unknown cluster 'lots-of-gpus'")


def test_unknown_emitter_and_no_input(files, capsys):
    code, _, err = cli(capsys, "ok.gir", "--emit=pdf")
    assert code == 1 and one_error(err).startswith("error: unknown output format 'pdf' (known: ")
    code, _, err = cli(capsys)
    assert code == 1 and one_error(err) == "error: no input file given (try 'graphir-opt --help')"


def test_pass_failure_exit_code(files, capsys, repo_root, isolated_registry):
    plugin = str(repo_root / "examples" / "uniform_cost.py")
    code, out, err = cli(capsys, "ok.gir", "--load-plugin", plugin, "--passes=dce,uniform-cost{seconds=-1}")
    assert code == 1 and out == ""
    assert (
        one_error(err)
        == "error: pass 'uniform-cost' failed after 'dce': 'seconds' must be a finite time >= 0, got -1.0"
    )


def test_option_rejected_by_the_pass_is_a_pipeline_error(files, capsys):
    code, out, err = cli(capsys, "ok.gir", "--passes=dce,strip-annotations{keys=colour}")
    assert code == 1 and out == ""
    assert one_error(err).startswith(
        "<pipeline>:1:5: error: invalid options for pass 'strip-annotations': unknown annotation key(s) colour"
    )


def test_missing_prerequisite(files, capsys, repo_root, isolated_registry):
    plugin = str(repo_root / "tests" / "filecheck" / "pipeline" / "Inputs" / "needs_fact.py")
    code, _, err = cli(capsys, "ok.gir", f"--load-plugin={plugin}", "--passes=needs-colour")
    assert code == 1
    assert (
        one_error(err)
        == "error: pass 'needs-colour' requires 'colour', which the module lacks; no registered pass provides it"
    )


def test_missing_prerequisite_runs_the_first_provider(files, capsys, repo_root, isolated_registry):
    plugin = str(repo_root / "examples" / "uniform_cost.py")
    code, _, err = cli(capsys, "ok.gir", f"--load-plugin={plugin}", "--passes=critical-path", "-v")
    assert code == 0
    # Built-in passes register first, so the built-in profile provides cost, not the plugin.
    assert "graphir-opt: running 'profile' to provide 'cost' required by 'critical-path'" in err


# ----------------------------------------------------------------------------- output file


def test_output_file_is_written_atomically(files, capsys):
    code, out, err = cli(capsys, "ok.gir", "--passes=dce", "-o", "out.gir")
    assert (code, out, err) == (0, "", "")
    written = (files / "out.gir").read_text()
    assert "%dead" not in written and "%z = onnx.Relu" in written
    assert sorted(p.name for p in files.iterdir()) == ["bad.gir", "cyc.gir", "model.txt", "ok.gir", "out.gir"]
    # The same text as on stdout.
    _, stdout_text, _ = cli(capsys, "ok.gir", "--passes=dce")
    assert stdout_text == written


def test_dash_output_is_stdout_not_a_file(files, capsys):
    code, out, err = cli(capsys, "ok.gir", "--passes=dce", "-o", "-")
    assert (code, err) == (0, "") and "%z = onnx.Relu" in out and "%dead" not in out
    assert not (files / "-").exists()
    assert out == cli(capsys, "ok.gir", "--passes=dce")[1]


def test_failing_run_leaves_no_output_file(files, capsys):
    code, _, _ = cli(capsys, "cyc.gir", "-o", "out.gir")
    assert code == 1
    code, _, _ = cli(capsys, "ok.gir", "--passes=strip-annotations{keys=colour}", "-o", "out.gir")
    assert code == 1
    assert not (files / "out.gir").exists()
    assert not [p for p in files.iterdir() if p.name.startswith(".out.gir")]


def test_failing_run_keeps_an_existing_output_file(files, capsys):
    (files / "out.gir").write_text("previous\n")
    code, _, _ = cli(capsys, "cyc.gir", "-o", "out.gir")
    assert code == 1
    assert (files / "out.gir").read_text() == "previous\n"


def test_output_into_missing_directory_is_a_one_line_error(files, capsys):
    code, out, err = cli(capsys, "ok.gir", "-o", "no/such/dir/out.gir")
    assert code == 1 and out == ""
    assert one_error(err).startswith("error: cannot write 'no/such/dir/out.gir'")


def test_output_file_gets_the_usual_permissions(files, capsys):
    import os

    umask = os.umask(0)
    os.umask(umask)
    assert cli(capsys, "ok.gir", "-o", "out.gir")[0] == 0
    assert (files / "out.gir").stat().st_mode & 0o777 == 0o666 & ~umask


# ----------------------------------------------------------------------------- split input


SPLIT = """\
module @a {
  graph @main(%x : f32[2]) {
    return %x
  }
}
// -----
module @b {
  graph @main(%x : f32[2]) {
    %y = onnx.Relu(%z) : (f32[2]) -> f32[2]
    return %y
  }
}
// -----
module @c {
  graph @main(%x : f32[2]) {
    return %x
  }
}
// -----
module @d {
  graph @main(%x : f32[2]) {
    %a = onnx.Relu(%b) : (f32[2]) -> f32[2]
    %b = onnx.Relu(%a) : (f32[2]) -> f32[2]
    return %b
  }
}
"""


def test_split_input_file_reports_each_chunk_with_original_lines(files, capsys):
    (files / "split.gir").write_text(SPLIT)
    code, out, err = cli(capsys, "split.gir", "--split-input-file")
    assert code == 1
    errors = [line for line in err.splitlines() if ": error: " in line]
    assert errors == [
        "split.gir:9:20: error: use of undefined value '%z'",
        "split.gir:22:5: error: graph 'main' has a cycle: a -> b -> a",
    ]
    # The good chunks are still processed and printed, separated by the marker.
    assert out.count("module @") == 2 and "module @a" in out and "module @c" in out
    assert "// -----\n" in out


def test_split_input_file_success_and_output_file(files, capsys):
    (files / "two.gir").write_text(OK_GIR + "// -----\n" + OK_GIR.replace("@m ", "@n "))
    code, out, err = cli(capsys, "two.gir", "--split-input-file", "--passes=dce", "-o", "o.gir")
    assert (code, out, err) == (0, "", "")
    text = (files / "o.gir").read_text()
    assert text.count("module @") == 2 and text.count("// -----\n") == 1 and "%dead" not in text
    (files / "split.gir").write_text(SPLIT)
    code, _, _ = cli(capsys, "split.gir", "--split-input-file", "-o", "p.gir")
    assert code == 1 and not (files / "p.gir").exists()


def test_split_input_file_missing_file(files, capsys):
    code, _, err = cli(capsys, "gone.gir", "--split-input-file")
    assert code == 1 and one_error(err).startswith("error: cannot read 'gone.gir'")


def test_stdin_input(files, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO(CYCLIC_GIR))
    code, _, err = cli(capsys, "-")
    assert code == 1 and one_error(err) == "<stdin>:3:5: error: graph 'main' has a cycle: a -> b -> a"
    monkeypatch.setattr(sys, "stdin", io.StringIO(OK_GIR))
    code, out, _ = cli(capsys, "-")
    assert code == 0 and out == OK_GIR


# ----------------------------------------------------------------------------- listings and emitters


def test_list_passes_shows_options_with_types_and_defaults(files, capsys):
    code, out, err = cli(capsys, "--list-passes")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[lines.index("dce: Remove nodes that do not contribute to any graph output.") + 1].startswith(
        "    keep: list<str> ="
    )
    assert any(line.lower() == "    prune-constants: bool = true" for line in lines)
    start = lines.index("critical-path: Report the critical-path length and total work (seconds) in the statistics.")
    assert lines[start + 1] == "    requires: cost"
    assert lines[start + 2].startswith("    kind: str = ")
    assert any(line.startswith("    keys: list<str> =") for line in lines)
    names = [line.split(":")[0] for line in lines if not line.startswith(" ")]
    assert names == sorted(names)


def test_list_emitters(files, capsys):
    code, out, _ = cli(capsys, "--list-emitters")
    assert code == 0
    assert {"gir", "json", "summary"} <= {line.split(":")[0] for line in out.splitlines()}


def test_emit_summary(files, capsys):
    code, out, err = cli(capsys, "ok.gir", "--emit=summary")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == "module @m (graph @main)"
    assert "  cluster:          2xV100 (2 devices)" in lines
    assert "  nodes:            3" in lines
    assert "  edges:            2" in lines
    assert "  parameter bytes:  48 B" in lines
    assert "  activation bytes: 96 B" in lines
    assert "  op types (2):" in lines
    assert lines[-2:] == [f"    {2:7d}  onnx.Relu", f"    {1:7d}  onnx.MatMul"]


def test_emit_summary_with_costs_and_placement(files, capsys):
    text = OK_GIR.replace("-> f32[2,4]\n", '-> f32[2,4] [cost = 2us, device = "gpu1", group = 1]\n')
    (files / "c.gir").write_text(text)
    code, out, _ = cli(capsys, "c.gir", "--emit=summary")
    assert code == 0
    assert "  costed nodes:     3/3" in out
    assert "  total compute:    6 us" in out
    assert "  critical path:    4 us" in out
    assert "  groups:           1 (quotient nodes)" in out
    assert "  placement:        gpu1: 3" in out


def test_emit_json(files, capsys):
    code, out, _ = cli(capsys, "ok.gir", "--emit=json", "--cluster=3xP100")
    assert code == 0
    data = json.loads(out)
    assert [d["name"] for d in data["devices"]] == ["gpu0", "gpu1", "gpu2"]
    assert [n["id"] for n in data["nodes"]] == ["y", "z", "dead"]


def test_cluster_option_overrides_the_header(files, capsys):
    code, out, _ = cli(capsys, "ok.gir", "--cluster=4xA100-nvlink")
    assert code == 0 and out.startswith('module @m {cluster = "4xA100-nvlink"} {')


# ----------------------------------------------------------------------------- plugins, stats, timing


def test_load_plugin_example(files, capsys, repo_root, isolated_registry):
    plugin = str(repo_root / "examples" / "uniform_cost.py")
    code, out, err = cli(
        capsys, "ok.gir", f"--load-plugin={plugin}", "--passes=uniform-cost,critical-path", "--stats", "-v"
    )
    assert code == 0
    assert out.count("[cost = 1us]") == 3
    assert "running 'profile'" not in err
    assert "uniform-cost.nodes-costed = 3" in err
    assert "critical-path.critical-path-s = 2e-06" in err
    assert "critical-path.total-work-s = 3e-06" in err


def test_load_plugin_explicit_options_and_timing(files, capsys, repo_root, isolated_registry):
    plugin = str(repo_root / "examples" / "uniform_cost.py")
    code, out, err = cli(
        capsys, "ok.gir", "--load-plugin", plugin, "--passes=uniform-cost{seconds=2e-6},critical-path", "--timing"
    )
    assert code == 0 and out.count("[cost = 2us]") == 3
    assert "===- Pass execution timing report -===" in err
    assert "uniform-cost{seconds=2e-06}" in err and "critical-path" in err
    code, _, err = cli(capsys, "ok.gir", "--load-plugin", plugin, "--passes=uniform-cost{seconds=-1}")
    assert code == 1 and "'seconds' must be a finite time >= 0, got -1.0" in one_error(err)


def test_load_plugin_listed(files, capsys, repo_root, isolated_registry):
    plugin = str(repo_root / "examples" / "uniform_cost.py")
    code, out, _ = cli(capsys, f"--load-plugin={plugin}", "--list-passes")
    assert code == 0
    assert "uniform-cost: Annotate every node with the same cost. Requires nothing; provides cost." in out
    assert "    provides: cost" in out
    assert "    seconds: float = 1e-06" in out


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("no_such_plugin_module_xyz", "error: cannot load plugin 'no_such_plugin_module_xyz': ModuleNotFoundError"),
        ("nowhere/plugin.py", "error: plugin file 'nowhere/plugin.py' does not exist"),
    ],
)
def test_bad_plugin(files, capsys, spec, fragment):
    code, _, err = cli(capsys, "ok.gir", f"--load-plugin={spec}")
    assert code == 1 and one_error(err).startswith(fragment)


def test_print_ir_after_goes_to_stderr(files, capsys):
    code, out, err = cli(capsys, "ok.gir", "--passes=dce,strip-annotations", "--print-ir-after=dce")
    assert code == 0 and out.startswith("module @m")
    assert err.startswith("// -----// IR after dce //----- //\nmodule @m")
    assert "IR after strip-annotations" not in err


def test_seed_reaches_metis(files, capsys):
    """--seed reaches the randomised placer: METIS's partition differs between seeds and repeats for one.

    The randomised passes are place{algo=metis} (pymetis's seed; auto runs it in its portfolio) and
    place{algo=ilp} (CP-SAT's random_seed, whose multi-worker search is not reproducible, so it is
    not compared here). On this 40-node graph seeds 0-3 give three different partitions.
    """
    Path("random.gir").write_text(print_module(random_module(2, 40, "4xV100")))

    def placement(seed: int) -> str:
        code, out, err = cli(capsys, "random.gir", "--passes=place{algo=metis}", "--emit=placement", f"--seed={seed}")
        assert code == 0 and err == ""
        return out

    first = [placement(seed) for seed in range(4)]
    assert len(set(first)) >= 2
    assert placement(1) == first[1]


# ----------------------------------------------------------------------------- the console script


def test_console_script_exit_codes(files):
    script = Path(sys.executable).parent / "graphir-opt"
    assert script.exists(), "the graphir-opt console script must be installed next to this interpreter"
    bad = subprocess.run([str(script), "missing.gir"], capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 1
    assert bad.stderr == "error: 'missing.gir': no such file\n" and bad.stdout == ""
    good = subprocess.run(
        [str(script), "ok.gir", "--passes=dce"], capture_output=True, text=True, timeout=60, check=False
    )
    assert good.returncode == 0 and good.stdout.startswith("module @m") and good.stderr == ""


EXIT_PLUGIN = """\
import atexit, os, pathlib, threading, time

def _mark():
    pathlib.Path("atexit-ran").write_text("yes")

atexit.register(_mark)
if os.environ.get("EXIT_PLUGIN_THREAD"):
    def _late():
        time.sleep(0.3)
        pathlib.Path("thread-ran").write_text("yes")

    threading.Thread(target=_late, daemon=False).start()
"""


def test_console_script_ends_without_teardown_but_keeps_exit_handlers(files):
    """``main`` skips the interpreter's teardown: exit handlers still run, all output arrives, and
    a thread that is not a daemon is still waited for (the normal exit is taken then)."""
    script = Path(sys.executable).parent / "graphir-opt"
    (files / "exit_plugin.py").write_text(EXIT_PLUGIN)
    # Many nodes: the printed module (stdout, a pipe) is larger than any pipe buffer.
    lines = [f"    %n{i} = onnx.Relu(%n{i - 1}) : (f32[2]) -> f32[2]" for i in range(1, 3000)]
    (files / "long.gir").write_text(
        "module @m {\n  graph @main(%n0 : f32[2]) {\n" + "\n".join(lines) + "\n    return %n2999\n  }\n}\n"
    )
    done = subprocess.run(
        [str(script), "long.gir", "--load-plugin=exit_plugin.py"],
        capture_output=True, text=True, timeout=60, check=False, cwd=files,
    )  # fmt: skip
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.startswith("module @m") and done.stdout.endswith("    return %n2999\n  }\n}\n")
    assert (files / "atexit-ran").read_text() == "yes"
    (files / "atexit-ran").unlink()
    threaded = subprocess.run(
        [str(script), "ok.gir", "--load-plugin=exit_plugin.py"],
        capture_output=True, text=True, timeout=60, check=False, cwd=files,
        env={**os.environ, "EXIT_PLUGIN_THREAD": "1"},
    )  # fmt: skip
    assert threaded.returncode == 0 and threaded.stdout.startswith("module @m")
    assert (files / "thread-ran").read_text() == "yes"  # waited for, not cut off
    assert (files / "atexit-ran").read_text() == "yes"


def test_negative_seed_is_handled(files, capsys, isolated_registry):
    register_pass(_Shuffle)
    code, out, err = cli(capsys, "ok.gir", "--passes=test-shuffle", "--seed=-1")
    assert code == 1 and out == ""
    assert err == "graphir-opt: error: argument --seed: invalid seed '-1': expected an integer >= 0 (see --help)\n"


@dataclasses.dataclass(frozen=True)
class _Shuffle(Pass):
    name: ClassVar[str] = "test-shuffle"

    def run(self, module, ctx):
        return PassResult(False, {"draw": float(ctx.rng().random())})


def test_output_to_a_special_file_writes_through_it(tmp_path):
    """``-o /dev/null`` (or a FIFO) is written in place: an atomic rename would replace the device node."""
    import os
    import stat
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    status = run([str(Path(__file__).parents[2] / "examples" / "mlp.gir"), "-o", str(fifo)])
    reader.join(timeout=30)
    assert status == 0
    assert stat.S_ISFIFO(fifo.stat().st_mode), "the FIFO was replaced by a regular file"
    assert received and received[0].startswith(b"module @")
