"""Seeds and mutators of the fuzzing harness: `.gir` text, ONNX models and TensorFlow GraphDefs.

Part of :mod:`devtools.fuzz` (whose docstring describes the harness). Each mutator takes the
input bytes, a seeded :class:`random.Random` and the corpus, and returns a mutant; the same seed
and corpus give the same mutants.
"""

from __future__ import annotations

import random
import re

from devtools.fuzz_worker import CANARY_DIR, REPO_ROOT

# ------------------------------------------------------------------------------------- .gir mutators

_TOKEN = re.compile(r"%[\w.$#/-]+|@[\w.$#/-]+|\"(?:[^\"\\]|\\.)*\"|-?\d+(?:\.\d+)?(?:e[-+]?\d+)?\w*|\w+|\s+|.", re.S)
_BOUNDARY_INTS = (
    "0", "-1", "1", "2", "7", "255", "65536", "2147483648", "4294967296", "4611686018427387904",
    "9223372036854775807", "9223372036854775808", "18446744073709551616", "1000000000000000",
    "1e308", "1e400", "-0", "0.0", "nan", "inf", "99999999999999999999999999999999",
)  # fmt: skip
_DTYPES = ("f32", "f16", "i64", "i1", "str", "resource", "variant", "token", "u4", "c128", "f99", "")
_ANNOTATIONS = (
    " [mem = {persistent = 18446744073709551616GiB}]",
    " [mem = {persistent = 1000000GiB}]",
    " [mem = {persistent = -5B}]",
    " [cost = 1e308s]",
    " [cost = -1us]",
    " [cost = nanus]",
    ' [device = "gpu:99"]',
    " [group = -3]",
    " [order = 9223372036854775808]",
    " [colocate = @nowhere]",
    " [affinity = []]",
)
_SPLICES = (
    "f32[4611686018427387904]",
    "f32[9223372036854775807,2]",
    "f32[1000000000000000]",
    "f32[-1]",
    "f32[0]",
    "f32[*]",
    "f32[?,?]",
    "{" * 200 + "}" * 200,
    "[" * 5000,
    '"\\u0000\\xff"',
    "%\u00e9\u4e2d",
    "@\ud7ff",
    "\u202e",
)


def mutate_gir(data: bytes, rng: random.Random, corpus: list[bytes]) -> bytes:
    """One to four grammar- or byte-level mutations of a `.gir` text."""
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3))):
        if rng.random() < 0.15:
            data = mutate_bytes(data, rng, corpus)
        else:
            text = data.decode("utf-8", "surrogateescape")
            data = _mutate_gir_text(text, rng, corpus).encode("utf-8", "surrogateescape")
    return data


def _mutate_gir_text(text: str, rng: random.Random, corpus: list[bytes]) -> str:
    lines = text.splitlines(keepends=True)
    # Half the time a mutation that keeps the syntax (annotation, rename, number, dtype), so that
    # passes and emitters, not only the parser, see hostile graphs.
    choice = rng.choice((1, 3, 5, 6)) if rng.random() < 0.5 else rng.randrange(9)
    if choice == 0 and len(lines) > 1:  # drop, duplicate or swap lines
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        op = rng.randrange(3)
        if op == 0:
            del lines[i]
        elif op == 1:
            lines.insert(j, lines[i])
        else:
            lines[i], lines[j] = lines[j], lines[i]
        return "".join(lines)
    if choice == 1 and lines:  # append a hostile annotation to an op line
        i = rng.randrange(len(lines))
        lines[i] = lines[i].rstrip("\n") + rng.choice(_ANNOTATIONS) + "\n"
        return "".join(lines)
    if choice == 2 and corpus:  # splice a line from another input
        other = rng.choice(corpus).decode("utf-8", "surrogateescape").splitlines(keepends=True)
        if other:
            lines.insert(rng.randrange(len(lines) + 1), rng.choice(other))
        return "".join(lines)
    tokens = _TOKEN.findall(text)
    if not tokens:
        return text
    k = rng.randrange(len(tokens))
    names = [t for t in tokens if t[:1] in "%@"]
    if choice in (3, 4) and names:  # rename: a use of another value (cycles, dangling, duplicates)
        k = rng.choice([i for i, t in enumerate(tokens) if t[:1] in "%@"])
        tokens[k] = tokens[k][0] + rng.choice(names)[1:] if rng.random() < 0.8 else tokens[k] + "_x"
    elif choice == 5:  # a boundary number in place of a number (dims, annotation values)
        numbers = [i for i, t in enumerate(tokens) if t[:1].isdigit() or (t[:1] == "-" and len(t) > 1)]
        if numbers:
            k = rng.choice(numbers)
            suffix = re.sub(r"^-?[\d.]+(e[-+]?\d+)?", "", tokens[k])
            tokens[k] = rng.choice(_BOUNDARY_INTS) + suffix
    elif choice == 6:  # dtype swap
        dtypes = [i for i, t in enumerate(tokens) if t in _DTYPES]
        if dtypes:
            tokens[rng.choice(dtypes)] = rng.choice(_DTYPES)
    elif choice == 7:
        tokens.insert(k, rng.choice(_SPLICES))
    else:  # delete or duplicate a token run
        span = rng.randint(1, 4)
        if rng.random() < 0.5:
            del tokens[k : k + span]
        else:
            tokens[k:k] = tokens[k : k + span]
    return "".join(tokens)


def mutate_bytes(data: bytes, rng: random.Random, corpus: list[bytes]) -> bytes:
    """Byte flips, insertions, deletions, duplications and splices."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(6)
        pos = rng.randrange(len(buf) + 1)
        if op == 0 and buf:
            pos = min(pos, len(buf) - 1)
            buf[pos] ^= 1 << rng.randrange(8)
        elif op == 1:
            buf[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 2:
            del buf[pos : pos + rng.randint(1, 16)]
        elif op == 3:
            buf[pos:pos] = buf[pos : pos + rng.randint(1, 64)]
        elif op == 4 and buf:
            pos = min(pos, len(buf) - 1)
            buf[pos] = rng.choice((0x00, 0xFF, 0x7F, 0x80, 0xC0, 0xFE))
        elif corpus:
            other = rng.choice(corpus)
            start = rng.randrange(len(other) + 1)
            buf[pos:] = other[start:]
    return bytes(buf)


# ------------------------------------------------------------------------------------- ONNX


def onnx_seeds() -> list[bytes]:
    """Small ONNX models built with the onnx API, plus the bundled SqueezeNet."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def model(nodes: list[onnx.NodeProto], inputs, outputs, inits=(), name="g") -> bytes:  # noqa: ANN001
        graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()

    f = TensorProto.FLOAT
    seeds = [
        model(
            [
                helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"),
                helper.make_node("Relu", ["h"], ["r"], name="act"),
                helper.make_node("Add", ["r", "b"], ["y"], name="bias"),
            ],
            [helper.make_tensor_value_info("x", f, [4, 8])],
            [helper.make_tensor_value_info("y", f, [4, 16])],
            [
                numpy_helper.from_array(np.ones((8, 16), np.float32), "w"),
                numpy_helper.from_array(np.zeros((16,), np.float32), "b"),
            ],
        ),
        model(
            [
                helper.make_node("Conv", ["x", "k"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                helper.make_node("MaxPool", ["c"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
                helper.make_node("Reshape", ["p", "shape"], ["flat"], name="flatten"),
                helper.make_node("Softmax", ["flat"], ["y"], name="sm", axis=-1),
            ],
            [helper.make_tensor_value_info("x", f, ["batch", 3, 8, 8])],
            [helper.make_tensor_value_info("y", f, None)],
            [
                numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "k"),
                numpy_helper.from_array(np.array([-1, 64], np.int64), "shape"),
            ],
        ),
        model(
            [
                helper.make_node("Split", ["x"], ["a", "b"], name="split", axis=0, num_outputs=2),
                helper.make_node("Mul", ["a", "b"], ["m"], name="mul"),
                helper.make_node("Concat", ["m", "a", "b"], ["y"], name="cat", axis=0),
                helper.make_node("Identity", ["y"], ["z"], name="id", domain="com.example"),
            ],
            [helper.make_tensor_value_info("x", f, [2, 5])],
            [helper.make_tensor_value_info("z", f, None)],
        ),
    ]
    squeezenet = REPO_ROOT / "examples" / "squeezenet.onnx"
    if squeezenet.is_file():
        seeds.append(squeezenet.read_bytes())
    return seeds


_ONNX_DIMS = (0, 1, 3, -1, -7, 2**31, 2**40, 2**62, 2**63 - 1, 10**15)
_NAME_BREAKERS = (b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x00", b"\xf0\x9f\x98")


def mutate_onnx(data: bytes, rng: random.Random, corpus: list[bytes]) -> bytes:
    """Structured (through the onnx API) or byte-level mutation of a serialized model."""
    import onnx

    if rng.random() < 0.2:
        return mutate_bytes(data, rng, corpus)
    try:
        model = onnx.load_from_string(data)
    except Exception:  # noqa: BLE001 - an earlier byte mutation: keep mutating bytes
        return mutate_bytes(data, rng, corpus)
    graph = model.graph
    choice = rng.randrange(10)
    names = [n for node in graph.node for n in (*node.input, *node.output)] + [t.name for t in graph.initializer]
    try:
        if choice == 0 and graph.initializer:  # absurd or negative initializer dims
            tensor = rng.choice(graph.initializer)
            if tensor.dims:
                tensor.dims[rng.randrange(len(tensor.dims))] = rng.choice(_ONNX_DIMS)
            else:
                tensor.dims.append(rng.choice(_ONNX_DIMS))
        elif choice == 1 and graph.input:  # absurd input dims or a symbol
            info = rng.choice(graph.input)
            dims = info.type.tensor_type.shape.dim
            if dims:
                dim = dims[rng.randrange(len(dims))]
                if rng.random() < 0.8:
                    dim.dim_value = rng.choice([d for d in _ONNX_DIMS if d >= 0])
                else:
                    dim.dim_param = rng.choice(("n", "1bad", "", "a b", "\u00e9"))
        elif choice == 2 and graph.node and names:  # rewire an operand (cycles, dangling uses)
            node = rng.choice(graph.node)
            if node.input:
                node.input[rng.randrange(len(node.input))] = rng.choice(names + ["", "nowhere"])
            else:
                node.input.append(rng.choice(names))
        elif choice == 3 and graph.node:  # drop or duplicate a node, or reorder two
            k = rng.randrange(len(graph.node))
            op = rng.randrange(3)
            if op == 0:
                del graph.node[k]
            elif op == 1:
                graph.node.add().CopyFrom(graph.node[k])
            else:
                j = rng.randrange(len(graph.node))
                a, b = onnx.NodeProto(), onnx.NodeProto()
                a.CopyFrom(graph.node[k])
                b.CopyFrom(graph.node[j])
                graph.node[k].CopyFrom(b)
                graph.node[j].CopyFrom(a)
        elif choice == 4 and graph.node:  # op type or domain
            node = rng.choice(graph.node)
            if rng.random() < 0.7:
                node.op_type = rng.choice(("Relu", "MatMul", "Loop", "If", "Unknown", "", "Conv", "Gemm"))
            else:
                node.domain = rng.choice(("", "ai.onnx", "com.microsoft", "x.y"))
        elif choice == 5:  # element types
            tensors = list(graph.initializer)
            if tensors and rng.random() < 0.5:
                rng.choice(tensors).data_type = rng.randrange(0, 26)
            elif graph.input:
                rng.choice(graph.input).type.tensor_type.elem_type = rng.randrange(0, 26)
        elif choice == 6 and graph.node:  # attributes: names and kinds
            node = rng.choice(graph.node)
            attr = node.attribute.add()
            attr.name = rng.choice(("axis", "kernel_shape", "", "x" * 300, "é"))
            kind = rng.randrange(4)
            if kind == 0:
                attr.type, attr.i = onnx.AttributeProto.INT, rng.choice((-1, 0, 2**62))
            elif kind == 1:
                attr.type = onnx.AttributeProto.INTS
                attr.ints.extend(rng.choice(_ONNX_DIMS) for _ in range(rng.randint(0, 4)))
            elif kind == 2:
                attr.type, attr.s = onnx.AttributeProto.STRING, bytes([0xFF, 0x41])
            else:
                attr.type = onnx.AttributeProto.TENSOR
                attr.t.dims.extend([rng.choice(_ONNX_DIMS)])
                attr.t.data_type = 1
        elif choice == 7:  # graph outputs
            if graph.output and rng.random() < 0.5:
                rng.choice(graph.output).name = rng.choice(names + ["nowhere", ""])
            elif names:
                graph.output.add().name = rng.choice(names)
        elif choice == 8:  # value_info with hostile shapes
            info = graph.value_info.add()
            info.name = rng.choice(names) if names else "v"
            info.type.tensor_type.elem_type = 1
            for _ in range(rng.randint(0, 3)):
                info.type.tensor_type.shape.dim.add().dim_value = rng.choice([d for d in _ONNX_DIMS if d >= 0])
        data = model.SerializeToString()
    except (ValueError, TypeError):  # a value protobuf refuses: keep the unmutated bytes
        data = model.SerializeToString()
    if choice == 9:
        data = _break_utf8(data, model, rng)
    return data


def _break_utf8(data: bytes, model: object, rng: random.Random) -> bytes:
    """Overwrite one name in the serialized model with invalid UTF-8 of the same length."""
    graph = model.graph
    candidates: list[str] = []
    for node in graph.node:
        candidates.extend([node.name, node.op_type, *node.input, *node.output])
        candidates.extend(a.name for a in node.attribute)
    candidates.extend(t.name for t in graph.initializer)
    candidates.extend(v.name for v in graph.input)
    candidates = [c for c in candidates if isinstance(c, str) and len(c.encode()) >= 3]
    if not candidates:
        return data
    name = rng.choice(candidates).encode()
    breaker = rng.choice(_NAME_BREAKERS)
    broken = (breaker * len(name))[: len(name)]
    if rng.random() < 0.5:
        broken = name[:1] + broken[1:]
    needle = bytes([len(name)]) + name if len(name) < 128 else name
    replacement = bytes([len(name)]) + broken if len(name) < 128 else broken
    return data.replace(needle, replacement, rng.randint(1, 3))


# ------------------------------------------------------------------------------------- GraphDef


def graphdef_seeds() -> list[bytes]:
    """The GraphDef fixtures of the golden tests, as binary protos."""
    from google.protobuf import text_format

    from graphir.importers.tf import load_tensorflow

    load_tensorflow()  # quietly: its start-up log lines are dropped
    from tensorflow.core.framework import graph_pb2

    seeds = []
    for path in sorted((REPO_ROOT / "tests" / "filecheck" / "tf" / "Inputs").glob("*.pbtxt")):
        graph_def = graph_pb2.GraphDef()
        try:
            text_format.Parse(path.read_text(), graph_def)
        except text_format.ParseError:
            continue
        seeds.append(graph_def.SerializeToString())
    return seeds


_TF_OPS = ("Placeholder", "Const", "Identity", "AddV2", "MatMul", "NoOp", "Split", "Relu", "Bogus", "")


def mutate_graphdef(data: bytes, rng: random.Random, corpus: list[bytes]) -> bytes:
    """Structured mutation of ``NodeDef`` messages, or a byte-level one."""
    from tensorflow.core.framework import graph_pb2, types_pb2

    if rng.random() < 0.25:
        return mutate_bytes(data, rng, corpus)
    graph_def = graph_pb2.GraphDef()
    try:
        graph_def.ParseFromString(data)
    except Exception:  # noqa: BLE001
        return mutate_bytes(data, rng, corpus)
    nodes = graph_def.node
    if not nodes:
        return mutate_bytes(data, rng, corpus)
    names = [n.name for n in nodes]
    node = rng.choice(nodes)
    choice = rng.randrange(7)
    if choice == 0:
        ref = rng.choice(names) + rng.choice(("", ":1", ":7", ":-1", ":x"))
        ref = ("^" + ref) if rng.random() < 0.2 else ref
        if node.input and rng.random() < 0.6:
            node.input[rng.randrange(len(node.input))] = ref
        else:
            node.input.append(ref)
    elif choice == 1:
        node.op = rng.choice(_TF_OPS)
    elif choice == 2:
        k = rng.randrange(len(nodes))
        if rng.random() < 0.5:
            del nodes[k]
        else:
            nodes.add().CopyFrom(nodes[k])
    elif choice == 3:
        shape = node.attr["shape"].shape
        shape.Clear()
        for _ in range(rng.randint(0, 3)):
            shape.dim.add().size = rng.choice((-1, 0, 3, 2**40, 2**62, 2**63 - 1))
    elif choice == 4:
        node.attr[rng.choice(("dtype", "T"))].type = rng.choice(list(types_pb2.DataType.values()))
    elif choice == 5:
        node.device = rng.choice(("", "/device:GPU:7", "/job:x/task:-1", "garbage"))
    else:
        node.name = rng.choice(names + ["", "a/b", "x:0", "é"])
    return graph_def.SerializeToString()


def gir_seeds() -> list[bytes]:
    """Every chunk of the golden `.gir` tests and the examples, comments dropped."""
    seeds: list[bytes] = []
    paths = sorted((REPO_ROOT / "tests" / "filecheck").rglob("*.gir")) + [REPO_ROOT / "examples" / "mlp.gir"]
    for path in paths:
        if "Output" in path.parts or not path.is_file():
            continue
        chunks: list[list[str]] = [[]]
        for line in path.read_text().splitlines(keepends=True):
            if line.strip().startswith("// -----"):
                chunks.append([])
            elif not line.lstrip().startswith("//"):
                chunks[-1].append(line)
        for chunk in chunks:
            text = "".join(chunk).strip()
            if text.startswith("module") or text.startswith("graph"):
                seeds.append(text.encode() + b"\n")
    return sorted(set(seeds))


# ------------------------------------------------------------------------------------- run paths

_IO_OPS = ("WriteFile", "ReadFile", "MatchingFiles", "PrintV2", "PyFunc", "SaveV2", "ImmutableConst")


def graphdef_run_seeds() -> list[bytes]:
    """Small TensorFlow steps to run (``profile{mode=tf}``, ``--run-tf``), some with ops that reach outside.

    A dense layer, a convolution, a tiny training step with variables, and steps that also write a
    file (into the worker's directory and into :data:`CANARY_DIR`), read one, print into one or
    call Python; then the small GraphDef fixtures of the golden tests.
    """
    import os

    from graphir.importers.tf import concrete_function_graphdef, load_tensorflow

    tf = load_tensorflow()
    canary = str(CANARY_DIR / "stray.txt")

    def seed(body, *specs) -> bytes:  # noqa: ANN001
        function = tf.function(body, autograph=False)
        concrete = function.get_concrete_function(*specs)
        return concrete_function_graphdef(concrete).SerializeToString()

    matrix = tf.TensorSpec([8, 8], tf.float32, name="x")
    seeds = [
        seed(lambda x: tf.nn.relu(tf.matmul(x, x) + 1.0), matrix),
        seed(
            lambda x: tf.reduce_mean(tf.nn.conv2d(x, tf.ones([3, 3, 2, 4]), 1, "SAME")),
            tf.TensorSpec([1, 8, 8, 2], tf.float32, name="x"),
        ),
    ]
    weights = tf.Variable(tf.zeros([8, 4]), name="w")

    def train(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, weights)))
        update = weights.assign_sub(0.1 * tape.gradient(loss, weights))
        with tf.control_dependencies([update]):
            return tf.identity(loss)

    seeds.append(seed(train, matrix))

    def effect(make):  # noqa: ANN001
        def body(x):
            y = tf.matmul(x, x)
            with tf.control_dependencies(tf.nest.flatten(make(y))):
                return tf.identity(y)

        return seed(body, matrix)

    seeds += [
        effect(lambda y: tf.io.write_file("stray.txt", tf.strings.as_string(tf.reduce_sum(y)))),
        effect(lambda y: tf.io.write_file(canary, "x")),
        effect(lambda y: tf.strings.length(tf.io.read_file("/etc/hostname"))),
        effect(lambda y: tf.io.matching_files(os.path.join(str(CANARY_DIR), "*"))),
        effect(lambda y: tf.print(y, output_stream=f"file://{canary}")),
        effect(lambda y: tf.numpy_function(lambda a: a, [y], tf.float32)),
    ]
    return seeds + graphdef_seeds()


def mutate_graphdef_run(data: bytes, rng: random.Random, corpus: list[bytes]) -> bytes:
    """:func:`mutate_graphdef`, and now and then a node turned into an op that reaches outside the process."""
    if rng.random() >= 0.1:
        return mutate_graphdef(data, rng, corpus)
    from tensorflow.core.framework import graph_pb2

    graph_def = graph_pb2.GraphDef()
    try:
        graph_def.ParseFromString(data)
    except Exception:  # noqa: BLE001
        return mutate_bytes(data, rng, corpus)
    if not graph_def.node:
        return data
    rng.choice(graph_def.node).op = rng.choice(_IO_OPS)
    return graph_def.SerializeToString()


def onnx_run_seeds() -> list[bytes]:
    """The small ONNX seeds (under 100 KB: runs stay short), plus a model with an op of a custom domain."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"),
            helper.make_node("Evil", ["h"], ["y"], name="evil", domain="com.example.evil"),
        ],
        "custom",
        [helper.make_tensor_value_info("x", f, [4, 4])],
        [helper.make_tensor_value_info("y", f, [4, 4])],
        [numpy_helper.from_array(np.ones((4, 4), np.float32), "w")],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.example.evil", 1)]
    custom = helper.make_model(graph, opset_imports=opsets).SerializeToString()
    return [seed for seed in onnx_seeds() if len(seed) < 100_000] + [custom]
