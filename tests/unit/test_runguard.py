"""Untrusted models (graphir.runguard): ops that reach outside the process, memory, time limits.

Every op family of the guard's list gets a small graph that every run path refuses before it
runs (no file appears, no worker starts) and that ``--allow-io-ops`` lets through. Refusals are
checked in process (nothing runs); allowed runs that need fresh TensorFlow devices run in a
subprocess.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import tensorflow as tf  # noqa: E402  (installed by make: the tf extra)

from graphir.backends.host import CACHE_DIR_ENV, CPU_MEASURE_ENV  # noqa: E402
from graphir.backends.tf.check import check_onnx_model  # noqa: E402
from graphir.driver import run  # noqa: E402
from graphir.importers.tf import concrete_function_graphdef  # noqa: E402
from graphir.parser import parse_module  # noqa: E402
from graphir.runguard import (  # noqa: E402
    IO_FAMILIES,
    RunMemoryError,
    RunRefusedError,
    allowing_io_ops,
    available_memory,
    check_run_memory,
    check_runnable,
    io_family,
    refusals,
    run_memory,
)
from graphir.tools import tune  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(autouse=True)
def fixed_cpu(monkeypatch, tmp_path):
    monkeypatch.setenv(CPU_MEASURE_ENV, "0")
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "cache"))


def _step_graph(kind: str, path: Path) -> bytes:
    """A matmul step that also does ``kind`` (one op family), as a serialized GraphDef."""

    @tf.function(autograph=False)
    def step(x):
        y = tf.matmul(x, x)
        if kind == "write":  # files: io_ops.cc WriteFile
            effect = tf.io.write_file(str(path), tf.strings.as_string(tf.reduce_sum(y)))
        elif kind == "read":  # files: io_ops.cc ReadFile
            effect = tf.strings.length(tf.io.read_file("/etc/hostname"))
        elif kind == "print-file":  # files: logging_ops.cc PrintV2 into a file
            effect = tf.print(y, output_stream=f"file://{path}")
        elif kind == "while-write":  # files, inside a function body of the library

            def body(i):
                with tf.control_dependencies([tf.io.write_file(str(path), "x")]):
                    return i + 1

            effect = tf.while_loop(lambda i: i < 2, body, [tf.constant(0)])
        elif kind == "collective":  # network: exchanges tensors with other tasks
            effect = tf.raw_ops.CollectiveReduceV2(
                input=y, group_size=2, group_key=1, instance_key=1, ordering_token=[], merge_op="Add", final_op="Id"
            )
        elif kind == "py-func":  # python: script_ops.cc PyFunc
            effect = tf.numpy_function(lambda a: a * 2, [y], tf.float32)
        else:
            raise AssertionError(kind)
        with tf.control_dependencies(tf.nest.flatten(effect)):
            return tf.identity(y)

    concrete = step.get_concrete_function(tf.TensorSpec([4, 4], tf.float32, name="x"))
    return concrete_function_graphdef(concrete).SerializeToString()


UNREGISTERED_GIR = """module @custom {
  graph @main(%x: f32[4,4]) {
    %y = tf.MatMul(%x, %x) {T = "f32", transpose_a = false, transpose_b = false} : (f32[4,4], f32[4,4]) -> f32[4,4]
    %z = tf.GraphirNoSuchKernel(%y) {T = "f32"} : (f32[4,4]) -> f32[4,4]
    return %z
  }
}
"""


def _custom_domain_onnx(path: Path, in_subgraph: bool = False) -> Path:
    """An ONNX model with an op of a custom domain (at top level, or inside an ``If`` branch)."""
    f = TensorProto.FLOAT
    evil = helper.make_node("Evil", ["h"], ["e"], name="evil", domain="com.example.evil")
    if in_subgraph:
        branch = helper.make_graph(
            [helper.make_node("Evil", ["h"], ["b"], name="evil_in_branch", domain="com.example.evil")],
            "branch",
            [],
            [helper.make_tensor_value_info("b", f, [4, 4])],
        )
        plain = helper.make_graph(
            [helper.make_node("Identity", ["h"], ["c"], name="plain")],
            "plain",
            [],
            [helper.make_tensor_value_info("c", f, [4, 4])],
        )
        evil = helper.make_node("If", ["cond"], ["e"], name="branchy", then_branch=branch, else_branch=plain)
    inputs = [helper.make_tensor_value_info("x", f, [4, 4])]
    if in_subgraph:  # a graph input (its initializer a default): not a constant, so the If stays a region
        inputs.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"), evil],
        "g",
        inputs,
        [helper.make_tensor_value_info("e", f, [4, 4])],
        [
            numpy_helper.from_array(np.ones((4, 4), np.float32), "w"),
            numpy_helper.from_array(np.array(True), "cond"),
        ],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example.evil", 1)]
    )
    onnx.save(model, path)
    return path


TF_FAMILIES = {  # graph kind -> (family, node refused)
    "write": ("files", "WriteFile"),
    "read": ("files", "ReadFile"),
    "print-file": ("files", "PrintV2"),
    "while-write": ("files", "while/WriteFile"),
    "collective": ("network", "CollectiveReduceV2"),
    "py-func": ("python", "PyFunc"),
}

RUN_PATHS = {  # every run path of graphir-opt, with what it needs to get there
    "profile{mode=tf}": ["--passes=profile{mode=tf}"],
    "profile{mode=regression}": ["--passes=profile{mode=regression}"],
    "profile{mode=tf-run}": ["--cluster=2xcpu-workers", "--passes=profile{mode=tf-run}"],
    "profile{mode=standard-eval}": ["--cluster=2xcpu-workers", "--passes=profile{mode=standard-eval}"],
    "profile{mode=onnxruntime}": ["--passes=profile{mode=onnxruntime}"],
    "--run-tf": ["--cluster=2xcpu", "--passes=place{algo=m-topo}", "--run-tf=1"],
    "--run-tf (rig)": ["--cluster=2xcpu-workers", "--passes=place{algo=m-topo}", "--run-tf=1"],
}


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("untrusted")
    out = {}
    for kind in TF_FAMILIES:
        out[kind] = folder / f"{kind}.pb"
        out[kind].write_bytes(_step_graph(kind, folder / f"stray-{kind}.txt"))
    out["unregistered"] = folder / "unregistered.gir"
    out["unregistered"].write_text(UNREGISTERED_GIR)
    out["custom-domain"] = _custom_domain_onnx(folder / "custom.onnx")
    out["custom-domain-if"] = _custom_domain_onnx(folder / "custom_if.onnx", in_subgraph=True)
    return out


def _stray(model: Path) -> Path:
    return model.with_name(f"stray-{model.stem}.txt")


def _refusal_line(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip() and ": warning: " not in line]
    assert len(lines) == 1, lines  # one line, no traceback
    return lines[0]


def test_the_list_is_one_table_with_its_families():
    assert [family.name for family in IO_FAMILIES] == ["files", "network", "python"]
    for op in ("ReadFile", "WriteFile", "MatchingFiles", "SaveV2", "RestoreV2", "MergeV2Checkpoints", "ImmutableConst"):
        assert io_family(op).name == "files", op
    assert io_family("TFRecordDataset").name == "files" and io_family("CreateSummaryFileWriter").name == "files"
    assert io_family("RpcClient").name == "network" and io_family("DataServiceDatasetV4").name == "network"
    assert io_family("EagerPyFunc").name == "python" and io_family("NumpyFunction").name == "python"
    # PrintV2 only when it prints into a file; debug ops only with a dump URL
    assert io_family("PrintV2", {"output_stream": "stderr"}) is None
    assert io_family("PrintV2", {"output_stream": "file:///tmp/x"}).name == "files"
    assert io_family("DebugIdentity", {"debug_urls": ("grpc://evil:1",)}).name == "network"
    assert io_family("DebugIdentity", {"debug_urls": ()}) is None
    assert io_family("MatMul") is None and io_family("Conv2D") is None


@pytest.mark.parametrize("kind", sorted(TF_FAMILIES))
def test_each_tf_family_is_found_with_its_node(models, kind):
    from graphir.importers import load_module

    family, node = TF_FAMILIES[kind]
    module = load_module(str(models[kind]))
    (found,) = refusals(module)
    # The loop's body is imported as a region (graphir.importers.tf_regions): its nodes are named "body/..."
    assert found.node == (f"body/{node}" if kind == "while-write" else node)
    assert io_family(found.op[3:], {"output_stream": "file://x"}).name == family
    assert ("region 'body' of 'while'" in (found.where or "")) == (kind == "while-write")
    with allowing_io_ops():
        check_runnable(module, "x")  # the flag lets it through


@pytest.mark.parametrize("kind", [*sorted(TF_FAMILIES), "unregistered", "custom-domain", "custom-domain-if"])
@pytest.mark.parametrize("path", sorted(RUN_PATHS))
def test_every_run_path_refuses_each_family_before_running(models, kind, path, capsys, tmp_path):
    model = models[kind]
    status = run([str(model), *RUN_PATHS[path], "--emit=summary", "-o", str(tmp_path / "out.txt")])
    line = _refusal_line(capsys)
    assert status == 1
    assert "refused" in line and "--allow-io-ops" in line, line
    expected = TF_FAMILIES.get(kind, (None, {"unregistered": "z"}.get(kind, "evil")))[1]
    if kind == "custom-domain-if":
        expected = "evil_in_branch"
    if kind == "while-write":  # the loop's body is a region: its nodes are named "body/..."
        expected = f"body/{expected}"
    assert f"node '{expected}'" in line, line
    assert not _stray(model).exists()
    assert not (tmp_path / "out.txt").exists()


@pytest.mark.parametrize("kind", [*sorted(TF_FAMILIES), "unregistered"])
def test_graphir_tune_refuses_before_starting_workers(models, kind, capsys, tmp_path):
    status = tune.main([str(models[kind]), "--cluster", "2xcpu-workers", "-o", str(tmp_path / "tune")])
    line = _refusal_line(capsys)
    assert status == 1 and line.startswith("graphir-tune: ") and "--allow-io-ops" in line, line
    assert not _stray(models[kind]).exists()


@pytest.mark.parametrize("kind", ["custom-domain", "custom-domain-if"])
def test_the_check_tool_refuses_custom_domains(models, kind):
    with pytest.raises(RunRefusedError, match="custom ONNX domain 'com.example.evil'"):
        check_onnx_model(models[kind], "2xcpu", "", False, 2)


def test_importing_placing_simulating_and_lowering_stay_allowed(models, tmp_path, capsys):
    status = run(
        [
            str(models["write"]),
            "--cluster=2xcpu",
            "--passes=profile,place{algo=m-topo},simulate",
            "--emit=tf-graphdef",
            "-o",
            str(tmp_path / "lowered.pb"),
        ]
    )
    assert status == 0, capsys.readouterr().err
    assert (tmp_path / "lowered.pb").stat().st_size > 0
    assert not _stray(models["write"]).exists()


@pytest.mark.parametrize("kind", [*sorted(TF_FAMILIES), "unregistered"])
def test_allow_io_ops_lets_profile_tf_run_each_family(models, kind, capsys, tmp_path):
    """With the flag nothing is refused: the run happens (the file is written) or TensorFlow fails in one line."""
    out = tmp_path / "out.txt"
    argv = [str(models[kind]), "--passes=profile{mode=tf iterations=1 warmup=0}", "--emit=summary", "-o", str(out)]
    status = run([*argv, "--allow-io-ops", "--run-timeout=5"])
    err = capsys.readouterr().err
    assert "refused" not in err and "Traceback" not in err, err
    if kind in ("write", "print-file", "while-write"):  # the While's body is a region, re-emitted as a function
        assert status == 0, err
        assert _stray(models[kind]).exists()  # it did run: the graph's own effect
        _stray(models[kind]).unlink()
    elif kind in ("read", "py-func"):  # the callback exists in this process (the test built the graph here)
        assert status == 0, err
    else:  # a collective waits for peers (the time limit ends it); a kernel TF lacks fails
        assert status == 1 and len([x for x in err.splitlines() if x.strip() and ": warning: " not in x]) == 1, err
        if kind == "collective":
            assert "did not finish within its time limit of 5 s (--run-timeout)" in err, err


def _subprocess(argv: list[str], tmp_path: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", GRAPHIR_MEASURE_CPU="0", GRAPHIR_CACHE_DIR=str(tmp_path / "c"))
    command = [sys.executable, "-c", "import sys; from graphir.driver import run; sys.exit(run(sys.argv[1:]))", *argv]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, check=False)


def test_allow_io_ops_lets_run_tf_run_a_file_writing_graph(models, tmp_path, capsys):
    model = models["write"]
    argv = [str(model), *RUN_PATHS["--run-tf"], "--emit=summary", "-o", str(tmp_path / "o.txt")]
    # refused before anything runs: in this process (the run, which configures TF's devices, needs its own)
    assert run(argv) == 1
    assert "--allow-io-ops" in _refusal_line(capsys) and not _stray(model).exists()
    allowed = _subprocess([*argv, "--allow-io-ops"], tmp_path)
    assert allowed.returncode == 0, allowed.stderr[-2000:]
    assert "run-tf: measured median" in allowed.stderr
    assert _stray(model).exists()
    _stray(model).unlink()


# --------------------------------------------------------------------------- memory


def _huge_graph(path: Path, nbytes: int) -> Path:
    """A step that fills a float32 tensor of ``nbytes`` bytes (static shape) and sums it."""
    count = nbytes // 4

    @tf.function(autograph=False)
    def step(x):
        big = tf.fill(tf.constant([count], tf.int64), x)
        return tf.reduce_sum(big)

    concrete = step.get_concrete_function(tf.TensorSpec([], tf.float32, name="x"))
    path.write_bytes(concrete_function_graphdef(concrete).SerializeToString())
    return path


@pytest.mark.parametrize(
    "path", ["profile{mode=tf}", "profile{mode=tf-run}", "profile{mode=standard-eval}", "--run-tf", "--run-tf (rig)"]
)
def test_a_run_needing_100x_the_machine_is_refused_before_tensorflow_allocates(path, tmp_path, capsys):
    available = available_memory()
    assert available > 0
    model = _huge_graph(tmp_path / "huge.pb", 100 * available)
    # --allow-oom: placement would refuse the node first (larger than every device of the cluster)
    status = run([str(model), *RUN_PATHS[path], "--allow-oom", "--emit=summary", "-o", str(tmp_path / "o.txt")])
    line = _refusal_line(capsys)
    assert status == 1
    assert "more than this machine can give" in line and "available" in line, line
    assert "device '" in line and "needs" in line, line


def test_run_memory_is_the_liveness_peak_per_device():
    module = parse_module(
        """module @m {
  graph @main(%x: f32[1024]) {
    %a = graphir.split(%x) : (f32[1024]) -> f32[1024] [device = "cpu0"]
    %b = graphir.split(%a) : (f32[1024]) -> f32[1024] [device = "cpu1"]
    %c = graphir.split(%b) : (f32[1024]) -> f32[1024] [device = "cpu1"]
    return %c
  }
}
""",
        "m.gir",
    )
    from graphir.cluster import resolve_cluster

    module.set_cluster(resolve_cluster("2xcpu"))
    needs = run_memory(module)
    # cpu0: the input (4 KiB) and %a until it reached cpu1; cpu1: %a's copy, %b, %c (an output)
    assert needs == {"cpu0": 8192, "cpu1": 8192}, needs
    check_run_memory(module, "x", available=16384)
    with pytest.raises(RunMemoryError, match="together need 16.00 KiB"):
        check_run_memory(module, "x", available=12288)
    expected = r"device 'cpu0' needs 8.00 KiB \(8192 B\).* 4.00 KiB \(4096 B\) available"
    with pytest.raises(RunMemoryError, match=expected):
        check_run_memory(module, "x", available=4096)


def test_resource_exhausted_inside_tensorflow_is_one_line():
    from graphir.backends.tf.run import tf_run_error

    error = tf_run_error(tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor\nmore"), "--run-tf")
    assert error.one_line() == (
        "error: --run-tf: TensorFlow ran out of memory (ResourceExhaustedError: OOM when allocating tensor)"
    )


# --------------------------------------------------------------------------- time


@pytest.mark.slow
def test_a_hung_rig_worker_is_ended_within_the_time_limit(tmp_path):
    """A worker that stops answering (SIGSTOP) makes the run fail at its limit; every worker is ended."""
    from graphir.backends.tf.rig import rig, run_on_rig
    from graphir.cluster import resolve_cluster
    from graphir.importers.tf import from_concrete_function
    from graphir.runguard import RunTimeoutError

    @tf.function(autograph=False)
    def step(x):
        return tf.matmul(x, x) + 1.0

    module = from_concrete_function(step.get_concrete_function(tf.TensorSpec([8, 8], tf.float32)), "tiny")
    module.set_cluster(resolve_cluster("2xcpu-workers"))
    for k, node in enumerate(module.graph.index().nodes):
        node.device = "worker1" if k % 2 else "worker0"
    with pytest.raises(RunTimeoutError) as caught:
        with rig(module.cluster) as servers:
            processes = list(servers.processes.values())
            os.kill(processes[1].pid, signal.SIGSTOP)
            began = time.monotonic()
            try:
                run_on_rig(module, servers, steps=1, warmup=0, trace_steps=0, timeout_s=5.0)
            finally:
                elapsed = time.monotonic() - began
    assert elapsed < 5.0 + 5.0, elapsed  # the limit, plus the client's own start-up of the session
    message = caught.value.one_line()
    assert "time limit of 5 s" in message and "/job:worker/task:1" in message and "hung (stopped)" in message
    assert all(process.poll() is not None for process in processes)  # ended, not left running


def test_dead_and_stopped_workers_are_named_and_ended():
    from graphir.backends.tf.distributed import LocalServers

    processes = {
        ("worker", k): subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(60)"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for k in range(3)
    }
    servers = LocalServers({"worker": ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]}, processes)
    try:
        processes[("worker", 0)].kill()
        processes[("worker", 0)].wait()
        os.kill(processes[("worker", 1)].pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and "hung" not in servers.troubled():
            time.sleep(0.05)
        report = servers.troubled()
        assert f"worker /job:worker/task:0 (pid {processes[('worker', 0)].pid}) died (killed by signal 9)" in report
        assert f"worker /job:worker/task:1 (pid {processes[('worker', 1)].pid}) hung (stopped)" in report
        assert "task:2" not in report  # still running normally
        began = time.monotonic()
        servers.close()
        assert time.monotonic() - began < 3  # the stopped one is continued after its SIGTERM, not waited for
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
    assert all(process.poll() is not None for process in processes.values())
