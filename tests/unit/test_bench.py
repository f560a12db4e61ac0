"""``graphir-bench``: matrices from flags and TOML, ratios, error cells, Markdown and JSON output."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import ClassVar

import onnx
import pytest

from graphir.ir import Module
from graphir.pass_infra import Pass, PassContext, PassResult, register_pass
from graphir.tools.bench import (
    BenchError,
    build_arg_parser,
    build_matrix,
    label_pipelines,
    load_matrix_file,
    markdown_table,
    run,
    run_matrix,
    split_label,
)

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MODELS = [str(LIGHT / "light_squeezenet.onnx"), str(LIGHT / "light_shufflenet.onnx")]
# moirai-intra: gpu0/gpu1 are V100s, gpu2/gpu3 slower P100s, so single-device on gpu0 is the best.
FAST = "fast=profile,place{algo=single device=gpu0},simulate"
SLOW = "slow=profile,place{algo=single device=gpu2},simulate"


def matrix_of(*argv: str):
    return build_matrix(build_arg_parser().parse_args(list(argv)))


def test_two_by_two_matrix_on_light_models(tmp_path, capsys):
    out = tmp_path / "results" / "light"
    code = run(
        ["--models", ",".join(MODELS), "--clusters", "moirai-intra", "--pipelines", FAST, SLOW, "--out", str(out)]
    )
    assert code == 0
    progress = capsys.readouterr().err
    assert progress.count("] light_") == 0  # progress names the model spec as given
    assert "[4/4]" in progress and "0 failed" in progress

    data = json.loads((out.parent / "light.json").read_text())
    cells = data["results"]
    assert [(Path(c["model"]).name, c["label"]) for c in cells] == [
        ("light_squeezenet.onnx", "fast"),
        ("light_squeezenet.onnx", "slow"),
        ("light_shufflenet.onnx", "fast"),
        ("light_shufflenet.onnx", "slow"),
    ]
    for fast, slow in (cells[0:2], cells[2:4]):
        assert fast["error"] is None and slow["error"] is None
        assert fast["ratio"] == 1.0  # the best of its model/cluster
        assert slow["ratio"] == pytest.approx(slow["makespan"] / fast["makespan"]) and slow["ratio"] > 1.0
        assert set(fast["peak_memory"]) == {"gpu0", "gpu1", "gpu2", "gpu3"}
        assert fast["peak_memory"]["gpu0"] > 0 and fast["peak_memory"]["gpu2"] == 0
        assert slow["peak_memory"]["gpu2"] > 0
        assert fast["oom"] == [] and fast["placement_s"] >= 0 and fast["nodes"] > 0
    assert data["pipelines"] == {"fast": FAST.split("=", 1)[1], "slow": SLOW.split("=", 1)[1]}

    table = (out.parent / "light.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| light_")]
    assert len(rows) == 4
    assert rows[0].startswith("| light_squeezenet.onnx | moirai-intra | fast |") and "**1.000**" in rows[0]
    assert rows[1].startswith("| light_squeezenet.onnx | moirai-intra | slow |") and "**" not in rows[1]


def test_failing_cells_are_recorded_not_fatal(capsys):
    matrix = matrix_of(
        "--models",
        f"{MODELS[0]},missing-model.onnx",
        "--clusters",
        "2xV100",
        "--pipelines",
        "ok=profile,place{algo=single},simulate",
        "bad=profile,place{algo=no-such-placer},simulate",
    )
    results = run_matrix(matrix, progress=None)
    assert [(Path(c.model).name, c.label, c.error is None) for c in results] == [
        ("light_squeezenet.onnx", "ok", True),
        ("light_squeezenet.onnx", "bad", False),
        ("missing-model.onnx", "ok", False),
        ("missing-model.onnx", "bad", False),
    ]
    assert results[0].ratio == 1.0
    assert "unknown placement algorithm 'no-such-placer'" in (results[1].error or "")
    assert "missing-model.onnx" in (results[2].error or "") and "\n" not in (results[2].error or "")
    table = markdown_table(matrix, results, "today", 1.0)
    error_rows = [line for line in table.splitlines() if "error:" in line]
    assert len(error_rows) == 3 and all(line.endswith("|") for line in error_rows)


@dataclasses.dataclass(frozen=True)
class _Sleep(Pass):
    """Sleep (to test the per-cell timeout)."""

    name: ClassVar[str] = "test-sleep"
    seconds: float = 5.0

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        time.sleep(self.seconds)
        return PassResult()


def test_timeout_is_an_error_cell(isolated_registry):
    register_pass(_Sleep)
    matrix = matrix_of(
        "--models",
        MODELS[0],
        "--clusters",
        "2xV100",
        "--pipelines",
        "profile,test-sleep,place,simulate",
        "--timeout",
        "0.3",
    )
    started = time.perf_counter()
    (cell,) = run_matrix(matrix)
    assert time.perf_counter() - started < 4.0
    assert cell.error == "timeout: the cell ran longer than 0.3 s"


def test_matrix_file_and_flag_override(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text(
        'name = "demo"\nout = "res/demo.md"\nseed = 3\nmodels = ["a.onnx"]\nclusters = ["4xV100"]\n'
        '[pipelines]\nsingle = "profile,place{algo=single},simulate"\nadj = "profile,place{algo=adjusting},simulate"\n'
    )
    matrix = matrix_of("--matrix", str(path))
    assert matrix.name == "demo" and matrix.seed == 3 and matrix.out == Path("res/demo")
    assert [label for label, _ in matrix.pipelines] == ["single", "adj"]
    matrix = matrix_of("--matrix", str(path), "--models", "b.onnx,c.onnx", "--seed", "1")
    assert matrix.models == ("b.onnx", "c.onnx") and matrix.seed == 1
    matrix = matrix_of("--models", "a", "--clusters", "c", "--pipelines", "x=place", "--pipelines", "y=dce;z=simulate")
    assert [label for label, _ in matrix.pipelines] == ["x", "y", "z"] and matrix.out is None


def test_standard_matrix_file_parses(repo_root):
    settings = load_matrix_file(repo_root / "benchmarks" / "matrix.toml")
    labels = [label for label, _ in settings["pipelines"]]
    assert {"single", "expert", "adjusting", "order-place", "dpos", "heft", "m-topo", "m-etf", "m-sct"} == set(labels)
    assert all(model.startswith("zoo:") and model.endswith("_train") for model in settings["models"])
    assert settings["clusters"] == ["celeritas"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("models = 3\n", "'models' must be a list"),
        ("seed = true\n", "'seed' must be int"),
        ("colour = 1\n", "unknown key(s) colour"),
        ("models = [\n", "invalid TOML"),
    ],
)
def test_bad_matrix_files(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(BenchError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_matrix_file(path)


def test_command_line_errors_are_one_line(tmp_path, capsys):
    assert run(["--models", "x.onnx", "--clusters", "4xV100"]) == 1
    assert "no pipelines to run" in capsys.readouterr().err
    assert run(["--models", "x.onnx", "--clusters", "nope", "--pipelines", "place"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("graphir-bench: ") and err.count("\n") == 1
    assert run(["--models", "x.onnx", "--clusters", "4xV100", "--pipelines", "place{algo=x"]) == 1
    assert "missing '}'" in capsys.readouterr().err


def test_labels():
    assert split_label("adj=profile,place{algo=adjusting}") == ("adj", "profile,place{algo=adjusting}")
    assert split_label("profile,place{algo=adjusting}") == (None, "profile,place{algo=adjusting}")
    labelled = label_pipelines(
        [(None, "profile,place{algo=m-etf},simulate"), (None, "place{algo=single}"), (None, "fuse,place{algo=single}")]
    )
    assert [label for label, _ in labelled] == ["m-etf", "place{algo=single}", "fuse,place{algo=single}"]
    with pytest.raises(BenchError, match="two pipelines are labelled 'x'"):
        label_pipelines([("x", "place"), ("x", "simulate")])


def test_cached_profile_gives_what_the_whole_pipeline_gives():
    from graphir.cluster import resolve_cluster
    from graphir.importers import load_module
    from graphir.pass_manager import PassManager
    from graphir.pipeline import parse_pipeline
    from graphir.simulator import simulate

    pipeline = "profile,fuse{algo=cpd-topo},place{algo=single device=gpu1},simulate"
    matrix = matrix_of("--models", MODELS[1], "--clusters", "2xV100", "--pipelines", pipeline, "--seed", "5")
    (cell,) = run_matrix(matrix)
    module = load_module(MODELS[1])
    module.set_cluster(resolve_cluster("2xV100"))
    records = PassManager(parse_pipeline(pipeline)).run(module, PassContext(seed=5))
    assert cell.makespan == simulate(module).makespan
    assert cell.peak_memory == dict(zip(("gpu0", "gpu1"), simulate(module).peak_memory.tolist(), strict=True))
    assert [r.pass_.name for r in records] == ["profile", "fuse", "place", "simulate"]
