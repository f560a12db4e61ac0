"""TensorFlow lowering of the zoo's inference ONNX models, proven against onnxruntime on 4 logical CPUs.

**Placement**: each model at its zoo batch (the real model) goes through
``profile,fuse{algo=cpd-topo},place{algo=adjusting mem-model=paper}`` on ``4xcpu``, and that placement (each
node's ``device``, by node name) is carried onto the re-batched copy below, which is then lowered
(:func:`graphir.backends.tf.lower`) and run. ``4xcpu`` is the cluster the lowering runs on (four
logical CPU devices of this machine), and at the zoo batches the adjusting placer under Celeritas's
own memory rule (``mem-model=paper``; under the default ``liveness`` it keeps ResNet-50 on two) spreads
every one of the eight models over all four devices (measured with ``GRAPHIR_MEASURE_CPU=0``, as
the test runs: e.g. ResNet-50 31/26/40/28 nodes, the Transformer 711/672/669/678), so no
memory-starved cluster is needed to make the placement non-trivial; the test requires all four
devices to be used. Placing the re-batched model itself would prove little: at batch 2 the
compute is so small next to the transfers that the placer keeps most models on one device.

**Proof**: every node result and the graph outputs must match onnxruntime within 1e-4 relative,
and TensorFlow's partition graphs must show every op on the device graphir assigned (the machinery
of :mod:`graphir.backends.tf.check`; the token models get integer token ids as inputs).

**Batch**: the zoo builds these models at the papers' batches (ResNet-50 at 128, Inception-v3 at
512, the Transformer at 256 x 64 tokens). Comparing every intermediate value at those batches would
need hundreds of GB (onnxruntime keeps each requested value) and hours on this 2-core machine, so
the models are re-batched to :data:`BATCH` for the numeric run (:func:`rebatched`: the graph
inputs' batch dimension and the batch in tf2onnx's constant ``Reshape`` targets change, the
weights are a copy of the same external-data file). Every op, weight and layer of the full model
is exercised, on the device the full model's placement chose for it.

**Sequence models** (:data:`SEQUENCE`, issue #41): ``lstm_seq_infer`` (tf2onnx: four ONNX ``LSTM``
ops), ``gru_lm_infer`` (the same Keras GRU weights as four ONNX ``GRU`` ops) and ``gru_seq_infer``
(tf2onnx: each Keras 3 GRU layer a ``Loop`` whose body is a region) are proven at their zoo batch
(32 x 32 tokens, 512 units: every value fits easily), so nothing is re-batched. They are a chain of
layers, so ``adjusting`` rightly keeps them on one device; they are placed by the papers' *Expert*
baseline instead (:data:`SEQUENCE_PIPELINE`: consecutive layers on consecutive devices, as Pesto
describes the experts' NMT placements), which uses all four. The recurrences lower to
``tf.while_loop``: the check finds each loop's parts (its machinery and its body's ops) in the
partition graphs on the loop's device.

**Fast check** (``make test``): the zoo models are built and proven in the slow suite only (ResNet-50
alone took 49 CPU s of ``make test`` in a fresh clone, its build included). ``make test`` proves
:func:`helpers.mini_resnet` the same way: Keras's own ResNet v1 code with one bottleneck block per
stack, converted by the zoo's :func:`~graphir.tools.zoo_convert.build_infer_onnx`, so its ONNX has
exactly ResNet-50's op kinds (:data:`RESNET50_OP_KINDS`), 25 nodes instead of 125. It is placed at
224 x 224, batch 512 (at batch 128, adjusting under ``mem-model=paper`` uses two of the four
devices; at 512 all four: 2/7/4/12 nodes), then re-batched to :data:`BATCH` for the numeric proof.

TensorFlow's logical devices are configured per process, so each check runs in a subprocess.
Results of every model: ``benchmarks/results/tf_lowering_zoo.md``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import build_infer_onnx

from graphir.tools.zoo import build_entry, zoo_dir

PIPELINE = "profile,fuse{algo=cpd-topo},place{algo=adjusting mem-model=paper}"
TOLERANCE = 1e-4
BATCH = 2
"""Batch of the re-batched models (see the module docstring)."""
DEVICES = ["cpu0", "cpu1", "cpu2", "cpu3"]
"""The ``4xcpu`` devices; the zoo-batch placement of every model uses all of them."""

SLOW = [
    "resnet50_infer",
    "inception_v3_infer",
    "vgg19_infer",
    "nasnet_mobile_infer",
    "nasnet_large_infer",
    "transformer_infer",
    "bert_large_infer",
    "gpt_infer",
]
SEQUENCE = ["lstm_seq_infer", "gru_lm_infer", "gru_seq_infer"]
"""Recurrent models proven at their zoo batch with :data:`SEQUENCE_PIPELINE` (see the module docstring)."""
SEQUENCE_PIPELINE = "profile,place{algo=expert}"
RESNET50_OP_KINDS = {
    "Add",
    "Conv",
    "GlobalAveragePool",
    "MatMul",
    "MaxPool",
    "Pad",
    "Relu",
    "Softmax",
    "Squeeze",
    "Transpose",
}
"""The ONNX op kinds of the zoo's ``resnet50_infer`` (tf2onnx folds the batch norms into the convolutions)."""


def rebatched(source: Path, batch: int, directory: Path) -> Path:
    """Write the model at ``source`` (a zoo model) with batch ``batch`` into ``directory``; its path.

    The graph inputs' first dimension becomes ``batch``; a constant ``Reshape`` target whose first
    entry is the old batch ``B`` (or ``B * S``, ``S`` the token models' sequence length) gets
    ``batch`` (``batch * S``). The external-data file (the weights) is copied next to it.
    """
    import onnx
    from onnx import numpy_helper

    model = onnx.load_model(str(source), load_external_data=False)
    graph = model.graph
    dims = graph.input[0].type.tensor_type.shape.dim
    old = dims[0].dim_value
    seq = dims[1].dim_value if len(dims) == 2 else 0
    for value in graph.input:
        value.type.tensor_type.shape.dim[0].dim_value = batch
    del graph.value_info[:]
    for value in graph.output:
        value.type.tensor_type.shape.dim[0].dim_value = batch
    shapes = {node.input[1] for node in graph.node if node.op_type == "Reshape"}
    for k, tensor in enumerate(graph.initializer):
        if tensor.name not in shapes:
            continue
        target = numpy_helper.to_array(tensor).copy()
        if target[0] == old:
            target[0] = batch
        elif seq and target[0] == old * seq:
            target[0] = batch * seq
        graph.initializer[k].CopyFrom(numpy_helper.from_array(target, tensor.name))
    path = directory / source.name
    onnx.save_model(model, str(path))
    data = source.with_name(source.name + ".data")
    if data.exists():  # the importer refuses symlinks leaving the directory, onnx's checker hard links
        shutil.copyfile(data, directory / data.name)
    return path


_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from collections import Counter
    from pathlib import Path
    import numpy as np
    from graphir.backends.tf.check import (
        configure_logical_cpus, placement_mismatches, relative_error, session_run)
    configure_logical_cpus(4)
    CLUSTER = "4xcpu"
    from graphir.backends.tf import lower
    from graphir.importers.onnx import import_onnx
    from graphir.pass_infra import PassContext
    from graphir.pass_manager import PassManager
    from graphir.pipeline import parse_pipeline
    from graphir.driver import load_builtin_passes

    load_builtin_passes()
    original, path = Path(sys.argv[1]), Path(sys.argv[2])
    # The real placement: the model at its zoo batch, placed on the cluster the lowering runs on.
    full = import_onnx(original)
    full.cluster_spec = CLUSTER
    # At the zoo batch some single tensors exceed a logical CPU's quarter of the host memory; the
    # placement is only used to assign devices for the batch-2 proof, so place them anyway.
    from graphir.budget import ALLOW_OOM
    ALLOW_OOM.set(True)
    PassManager(parse_pipeline(sys.argv[3])).run(full, PassContext(seed=0))
    placement = {n.name: n.device for n in full.graph.nodes}
    del full
    module = import_onnx(path)
    module.cluster_spec = CLUSTER
    names = {n.name for n in module.graph.nodes}
    if names != set(placement):
        raise SystemExit(f"re-batched model has other nodes: {sorted(names ^ set(placement))[:5]}")
    for node in module.graph.nodes:  # carried by name onto the re-batched copy of the same graph
        node.device = placement[node.name]
    lowered = lower(module)
    nodes = len(module.graph)
    ops_per_device = dict(sorted(Counter(n.device for n in module.graph.nodes if n.device).items()))
    data = np.load(sys.argv[4])
    inputs = [data[f"input_{k}"] for k in range(len(module.graph.inputs))]
    del module  # drop the IR copy before the TF run; keep the peak memory down
    names = sorted(lowered.value_tensors)
    expected = np.load(sys.argv[5])  # onnxruntime's values, computed in another process (memory)
    compared = [n for n in names if n in expected.files]
    actual = lowered(*inputs)
    fetched, placed = session_run(lowered, inputs, 4, [lowered.value_tensors[n] for n in compared])
    errors = {n: relative_error([got], [expected[n]]) for n, got in zip(compared, fetched)}
    worst = max(errors, key=errors.__getitem__)
    checked, problems = placement_mismatches(lowered, placed)
    # TensorFlow's ReplicateConstantsPass replaces a small constant consumed on several devices by
    # one copy per consuming device ("<name>/replicate/_k"): the original never runs, by design.
    replicas = {k.split("/replicate/")[0] for k in placed if "/replicate/" in k}
    replicated = [p for p in problems if p.endswith("not run") and p.split(":")[0] in replicas]
    problems = [p for p in problems if p not in replicated]
    print(json.dumps({
        "model": path.name,
        "nodes": nodes,
        "devices": sorted(ops_per_device),
        "ops_per_device": ops_per_device,
        "placed_nodes": sum(ops_per_device.values()),
        "output_rel_error": relative_error(actual, [expected[n] for n in lowered.output_names]),
        "values_compared": len(compared),
        "max_rel_error": errors[worst],
        "worst_value": worst,
        "ops_checked": checked,
        "placement_mismatches": problems[:20],
        "replicated_constants": len(replicated),
    }))
    """
)


_REFERENCE_SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np
    import onnx
    from graphir.backends.tf.check import reference_values
    path, inputs, out = sys.argv[1:4]
    model = onnx.load_model(path, load_external_data=False)
    names = [name for node in model.graph.node for name in node.output if name]
    data = np.load(inputs)
    feeds = {value.name: data[f"input_{k}"] for k, value in enumerate(model.graph.input)}
    np.savez(out, **reference_values(__import__("pathlib").Path(path), names, feeds))
    """
)


def _inputs(path: Path, out: Path) -> None:
    """Random inputs for the model at ``path`` (token ids for integer inputs) saved to ``out`` (npz)."""
    import onnx

    model = onnx.load_model(str(path), load_external_data=False)
    rng = np.random.default_rng(0)
    arrays = {}
    for k, value in enumerate(model.graph.input):
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type))
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        if dtype.kind in "iu":  # token ids (every zoo vocabulary has more than 1000 entries)
            arrays[f"input_{k}"] = rng.integers(0, 1000, shape).astype(dtype)
        else:
            arrays[f"input_{k}"] = rng.standard_normal(shape).astype(dtype)
    np.savez(out, **arrays)


def _run(command: list[str], tmp_path: Path) -> str:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", GRAPHIR_MEASURE_CPU="0", GRAPHIR_CACHE_DIR=str(tmp_path / "c"))
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=3600, check=False)
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-2000:]
    return result.stdout


def _check(original: Path, tmp_path: Path, batch: int | None = BATCH, pipeline: str = PIPELINE) -> dict:
    """Re-batch (unless ``batch`` is None), run onnxruntime in one process; place, lower, compare in another."""
    begin = time.perf_counter()
    path = original if batch is None else rebatched(original, batch, tmp_path)
    inputs, reference = tmp_path / "inputs.npz", tmp_path / "reference.npz"
    _inputs(path, inputs)
    _run([sys.executable, "-c", _REFERENCE_SCRIPT, str(path), str(inputs), str(reference)], tmp_path)
    command = [sys.executable, "-c", _SCRIPT, str(original), str(path), pipeline, str(inputs), str(reference)]
    stdout = _run(command, tmp_path)
    (report,) = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    report["wall_s"] = round(time.perf_counter() - begin, 1)
    print(json.dumps(report))  # the proof's numbers, shown with -s / -rA
    return report


def _assert_proven(result: dict) -> None:
    assert "error" not in result, result
    assert result["values_compared"] >= result["nodes"], result  # every node result, against onnxruntime
    assert result["max_rel_error"] <= TOLERANCE, result
    assert result["output_rel_error"] <= TOLERANCE, result
    assert result["ops_checked"] >= result["nodes"], result
    assert result["placement_mismatches"] == [], result
    assert result["placed_nodes"] == result["nodes"], result  # the zoo-batch placement covers every node
    assert result["devices"] == DEVICES, result  # the real placement spreads every zoo model over all four


def _require(name: str) -> Path:
    """The zoo entry's ONNX file, built when it is missing (as `graphir-opt zoo:<name>` would)."""
    path = zoo_dir() / f"{name}.onnx"
    if not path.is_file():
        build_entry(name, quiet=True)
    return path


def test_mini_resnet_lowers_and_matches(tmp_path):
    """The fast check of the zoo proofs below (see the module docstring): a ResNet placed over all four CPUs."""
    import onnx

    original = tmp_path / "built" / "mini_resnet_infer.onnx"  # re-batched beside it would take its name
    original.parent.mkdir()
    build_infer_onnx("mini_resnet", 512, original, size=224)
    kinds = {node.op_type for node in onnx.load_model(str(original), load_external_data=False).graph.node}
    assert kinds == RESNET50_OP_KINDS
    _assert_proven(_check(original, tmp_path))


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW)
def test_big_zoo_inference_model_lowers_and_matches(name, tmp_path):
    _assert_proven(_check(_require(name), tmp_path))


@pytest.mark.slow
@pytest.mark.parametrize("name", SEQUENCE)
def test_sequence_model_lowers_and_matches(name, tmp_path):
    result = _check(_require(name), tmp_path, batch=None, pipeline=SEQUENCE_PIPELINE)
    _assert_proven(result)
    assert result["ops_checked"] > 10 * result["nodes"], result  # the loops' parts were found and checked
