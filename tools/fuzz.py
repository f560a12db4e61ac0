"""Fuzz ``graphir-opt`` with mutated `.gir`, ONNX and TensorFlow GraphDef inputs.

Usage::

    python -m graphir.tools.fuzz --minutes 30 --seed 1 --report benchmarks/results/fuzz.md
    python -m graphir.tools.fuzz --runs 300 --seed 7          # a short, seeded slice

Every input goes through the real command-line driver (:func:`graphir.driver.run`) inside a
long-lived **worker process**; the parent sends one input at a time and watches it. Each run is
classified:

* ``ok``: exit status 0;
* ``error``: exit status 1 with a clean diagnostic (first stderr line ``... error: ...``, no
  traceback, and a pre-existing ``-o`` file left untouched);
* ``crash``: anything else (an exception escaping the driver, exit status 2 = internal error, a
  traceback on stderr, a clobbered output file, a worker killed by a signal);
* ``hang``: no answer within ``--timeout`` seconds of the worker's CPU time (wall time is bounded
  only loosely, so a machine busy with other work does not make slow inputs "hang"), or the
  worker's resident memory above
  ``--memory-mb`` (the worker is killed and restarted; the input is saved like a crash).

Inputs come from seeds (the golden `.gir` tests, the examples, small ONNX models built with the
``onnx`` API, the GraphDef fixtures) through mutators: for `.gir` a token-level grammar mutator
(numbers replaced by boundary values, names swapped to create cycles and dangling uses, lines
duplicated, dropped or swapped, hostile annotations and deep nesting spliced in) and a byte-level
one; for ONNX structured mutations through the protobuf API (dims, element types, renamed
operands, dropped nodes, invalid UTF-8 written over names) plus byte flips of the serialized
model; for GraphDef the same on ``NodeDef`` messages. A mutant whose outcome (ok, or the error
message with its quoted names and numbers masked) was never seen joins the corpus, a cheap
novelty feedback in place of coverage.

Each new crash (keyed by exception type and the innermost graphir frame) is minimised (greedy
removal of lines, nodes and tokens while the same crash persists) and saved as a reproducer under
``tests/data/crashes/`` (``<name>.<suffix>`` plus ``<name>.expected``: the arguments and the
expected first stderr line, left empty until the crash is fixed); ``tests/unit/test_crashes.py``
turns every saved reproducer into a regression test.

Everything is deterministic for a given ``--seed``: the mutation stream depends on the seed and on
the outcomes only, and outcomes are deterministic.

Atheris (coverage-guided) is not installed here and has no wheel for every Python; the mutators
are plain seeded Python so the harness runs wherever graphir runs.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import pickle
import random
import re
import select
import shlex
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CRASH_DIR = REPO_ROOT / "tests" / "data" / "crashes"

# ------------------------------------------------------------------------------------- pipelines

GIR_PIPELINES: tuple[tuple[str, ...], ...] = (
    ("--emit=summary",),
    ("--passes=profile,fuse,place,simulate",),
    ("--passes=profile,place{algo=m-etf},simulate", "--emit=json"),
)
ONNX_PIPELINES: tuple[tuple[str, ...], ...] = (
    ("--emit=summary",),
    ("--passes=fuse,place",),
)
GRAPHDEF_PIPELINES: tuple[tuple[str, ...], ...] = (
    ("--emit=summary",),
    ("--passes=profile,place",),
)
SUFFIX = {"gir": ".gir", "onnx": ".onnx", "graphdef": ".pb"}

# Pipelines generated from a grammar of pass specs with boundary option values (one `.gir` run in
# ten): option parsing and passes with hostile options. Passes that measure hardware
# (calibrate-comm, profile modes other than analytical) or solve exact problems (ilp) stay out:
# they are slow by design, not hung.
_INTS = ("0", "-1", "1", "2", "3", "7", "99999999999999999999")
_FLOATS = ("0", "0.5", "1", "-1", "nan", "inf", "1e308", "1e-300")
_PASS_SPECS: tuple[tuple[str, tuple[tuple[str, tuple[str, ...]], ...]], ...] = (
    ("profile", (("target", _INTS),)),
    (
        "fuse",
        (
            ("algo", ("cpd-topo", "rules", "acyclic-batch", "colocation", "bogus")),
            ("window", _INTS),
            ("mem-cap", _FLOATS),
            ("target", _INTS),
        ),
    ),
    ("place", (("algo", ("m-topo", "m-etf", "m-sct", "heft", "expert", "single", "metis", "adjusting", "dpos", "x")),)),
    ("schedule", ()),
    (
        "simulate",
        (
            ("congestion", ("pair", "port", "task", "topology")),
            ("order", ("enforced", "dynamic")),
            ("fail-on-oom", ("true", "false", "2")),
        ),
    ),
    ("critical-path", (("kind", ("", "V100", "nope")),)),
    ("dce", (("keep", ("y", "x,y", '""')), ("prune-constants", ("true", "false")))),
    ("strip-annotations", (("keys", ("device,order", "cost", "group", "nope")),)),
    ("topo-order", (("order", ("m-topo", "dfs-topo", "cpd-topo")), ("parts", _INTS))),
    ("split", (("op", ("y", "a", "nope", "")), ("parts", _INTS), ("axis", ("batch", "0", "1", "-1", "7")))),
    ("verify-acyclic", ()),
    ("os-dpos", ()),
)


def random_pipeline(rng: random.Random) -> str:
    """Two to four pass specs, each option present with probability one half."""
    parts = []
    for _ in range(rng.randint(1, 4)):
        name, options = rng.choice(_PASS_SPECS)
        chosen = [f"{key}={rng.choice(values)}" for key, values in options if rng.random() < 0.5]
        parts.append(name + ("{" + " ".join(chosen) + "}" if chosen else ""))
    text = ",".join(parts)
    if rng.random() < 0.1:  # and now and then a broken one
        k = rng.randrange(len(text) + 1)
        text = text[:k] + rng.choice(("{", "}", ",", "=", '"', " ", "{a=" * 50)) + text[k:]
    return text


OUTCOMES = ("ok", "error", "crash", "hang")


@dataclass(frozen=True)
class Job:
    """One run: the input kind, its bytes, and the driver arguments after the input path."""

    kind: str
    data: bytes
    args: tuple[str, ...]


@dataclass(frozen=True)
class Outcome:
    """What one run did: class, a key for novelty and crash identity, the first stderr line."""

    outcome: str
    key: str
    line: str
    detail: str = ""


# ------------------------------------------------------------------------------------- worker


def _worker_main() -> None:
    """Serve jobs from stdin (pickled, length-prefixed) until EOF; answer on the original stdout."""
    proto_in = os.fdopen(os.dup(0), "rb", buffering=0)
    proto_out = os.fdopen(os.dup(1), "wb", buffering=0)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # native libraries (TensorFlow, onnx) must not write into the protocol
        os.dup2(devnull, fd)
    import graphir.driver as driver
    from graphir.emit import load_builtin_emitters

    load_builtin_emitters()
    from graphir.importers.tf import load_tensorflow

    load_tensorflow()  # once, before the first job: its import is not a job's time
    workdir = Path(tempfile.mkdtemp(prefix="graphir-fuzz-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    while True:
        header = _read_exact(proto_in, 4)
        if header is None:
            return
        job: Job = pickle.loads(_read_exact(proto_in, struct.unpack("<I", header)[0]) or b"")
        answer = _run_job(driver, job, workdir)
        blob = pickle.dumps(answer)
        proto_out.write(struct.pack("<I", len(blob)) + blob)


def _read_exact(stream: io.RawIOBase, count: int) -> bytes | None:
    chunks = []
    while count:
        chunk = stream.read(count)
        if not chunk:
            return None
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


_SENTINEL = "graphir-fuzz: this file must survive a failing run\n"


def _run_job(driver: object, job: Job, workdir: Path) -> dict[str, object]:
    """Run the driver on one input; report status, stderr, stdout digest and output survival."""
    path = workdir / f"input{SUFFIX[job.kind]}"
    path.write_bytes(job.data)
    output = workdir / "out.txt"
    output.write_text(_SENTINEL)
    argv = [str(path), *job.args, "-o", str(output), "--debug"]
    stdout, stderr = io.StringIO(), io.StringIO()
    status: int | None = None
    escaped = ""
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            status = driver.run(argv)  # type: ignore[attr-defined]
        except BaseException:  # noqa: BLE001 - exactly what the fuzzer looks for
            escaped = traceback.format_exc()
    written = output.read_bytes() if output.is_file() else b""
    survived = written == _SENTINEL.encode()
    return {
        "status": status,
        "stderr": stderr.getvalue()[-20000:],
        "escaped": escaped[-20000:],
        "survived": survived,
        "output_hash": hashlib.sha256(written).hexdigest() if status == 0 else "",
    }


class Worker:
    """A restartable worker process with a per-input time limit and a resident-memory limit."""

    def __init__(self, timeout: float, memory_mb: int):
        self.timeout = timeout
        self.memory_bytes = memory_mb << 20
        self.proc: subprocess.Popen[bytes] | None = None
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.ticks = os.sysconf("SC_CLK_TCK")

    def _start(self) -> subprocess.Popen[bytes]:
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="", PYTHONHASHSEED="0")
        return subprocess.Popen(
            [sys.executable, "-m", "graphir.tools.fuzz", "--worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=REPO_ROOT,
        )

    def close(self) -> None:
        """Kill the worker (a fresh one starts on the next job)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            for stream in (self.proc.stdin, self.proc.stdout):
                if stream is not None:
                    stream.close()
            self.proc = None

    def _cpu_seconds(self) -> float:
        """User + system CPU time of the worker so far (0 when unreadable)."""
        assert self.proc is not None
        try:
            with open(f"/proc/{self.proc.pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / self.ticks
        except (OSError, ValueError, IndexError):
            return 0.0

    def _rss(self) -> int:
        assert self.proc is not None
        try:
            with open(f"/proc/{self.proc.pid}/statm") as statm:
                return int(statm.read().split()[1]) * self.page
        except (OSError, ValueError, IndexError):
            return 0

    def run(self, job: Job) -> dict[str, object] | str:
        """The worker's answer, or ``"hang"``/``"memory"``/``"died:<signal>"``."""
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        assert self.proc.stdin is not None and self.proc.stdout is not None
        blob = pickle.dumps(job)
        try:
            self.proc.stdin.write(struct.pack("<I", len(blob)) + blob)
            self.proc.stdin.flush()
        except BrokenPipeError:
            return self._died()
        # The limit is on the worker's CPU time, so a machine shared with other work (a loaded
        # 2-core box made TensorFlow's import take 40 s of wall time for 4 s of CPU) does not turn
        # slow into "hung"; wall time gets a generous bound for a worker blocked without computing.
        cpu_start = self._cpu_seconds()
        deadline = time.monotonic() + max(10 * self.timeout, 300.0)
        fd = self.proc.stdout.fileno()
        received = b""
        need = 4
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                return "hang"
            ready, _, _ = select.select([fd], [], [], min(left, 0.25))
            if not ready:
                if self._rss() > self.memory_bytes:
                    self.close()
                    return "memory"
                if self._cpu_seconds() - cpu_start > self.timeout:
                    self.close()
                    return "hang"
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return self._died()
            received += chunk
            if len(received) >= 4 and need == 4:
                need = 4 + struct.unpack("<I", received[:4])[0]
            if len(received) >= need > 4:
                return pickle.loads(received[4:need])

    def _died(self) -> str:
        assert self.proc is not None
        code = self.proc.wait()
        self.close()
        return f"died:{-code if code < 0 else code}"


# ------------------------------------------------------------------------------------- classify

_MASK = re.compile(r"'[^']*'|\"[^\"]*\"|-?\d+(\.\d+)?(e[-+]?\d+)?|0x[0-9a-f]+", re.IGNORECASE)
_ERROR_LINE = re.compile(r"(^|: )error: ")


def _frame_key(text: str) -> str:
    """``Type@file:function`` of the innermost graphir frame of a traceback text."""
    # In a chained report the first traceback is the original exception: its frames say where.
    first = re.split(r"\n(?:The above exception was the direct cause|During handling of the above exception)", text)[0]
    frames = re.findall(r'File "([^"]+)", line \d+, in (\S+)', first)
    inner = next(
        (f for f in reversed(frames) if "/graphir/" in f[0] or "/passes/" in f[0] or "/backends/" in f[0]),
        frames[-1] if frames else ("?", "?"),
    )
    reported = re.search(r"^error: internal error in [^:]*: ([\w.]+)", text, re.M)
    last = [line for line in text.strip().splitlines() if line and not line.startswith(" ")]
    exc_type = reported.group(1) if reported else (last[-1].split(":")[0] if last else "?")
    return f"{exc_type}@{Path(inner[0]).name}:{inner[1]}"


def classify(answer: dict[str, object] | str) -> Outcome:
    """Map a worker answer to an :class:`Outcome`."""
    if isinstance(answer, str):
        kind = "hang" if answer in ("hang", "memory") else "crash"
        return Outcome(kind, f"{kind}:{answer}", answer)
    stderr = str(answer["stderr"])
    lines = [line for line in stderr.splitlines() if ": warning: " not in line]
    first = lines[0] if lines else ""
    status = answer["status"]
    if answer["escaped"]:
        text = str(answer["escaped"])
        return Outcome("crash", "escaped:" + _frame_key(text), text.strip().splitlines()[-1], text)
    if status == 2 or "Traceback (most recent call last)" in stderr:
        return Outcome("crash", "internal:" + _frame_key(stderr), first, stderr)
    if status == 0:
        return Outcome("ok", "ok", "")
    if status == 1 and first and _ERROR_LINE.search(first):
        if not answer["survived"]:
            return Outcome("crash", "clobbered-output", first, stderr)
        return Outcome("error", "error:" + _MASK.sub("_", first.split("error: ", 1)[-1])[:160], first)
    return Outcome("crash", f"status:{status}:" + _MASK.sub("_", first)[:80], first, stderr)


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
    graph = model.graph  # type: ignore[attr-defined]
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


# ------------------------------------------------------------------------------------- minimise


def minimise(job: Job, still_fails: Callable[[Job], bool], budget: int = 150) -> Job:
    """Greedy reduction keeping ``still_fails``: lines (or ONNX/GraphDef nodes), then tokens."""
    tries = 0

    def attempt(candidate: Job) -> bool:
        nonlocal tries
        if tries >= budget or candidate.data == job.data:
            return False
        tries += 1
        return still_fails(candidate)

    for phase in range(2):
        split = _units(job, phase)
        if split is None:
            continue
        units, join = split
        k = len(units) - 1
        while k >= 0 and tries < budget:
            if k < len(units):
                trial = units[:k] + units[k + 1 :]
                candidate = Job(job.kind, join(trial), job.args)
                if attempt(candidate):
                    units, job = trial, candidate
            k -= 1
    return job


def _units(job: Job, phase: int) -> tuple[list, Callable[[list], bytes]] | None:
    """The pieces reduction may drop: `.gir` lines then tokens; ONNX nodes then other lists."""
    if job.kind == "gir":
        text = job.data.decode("utf-8", "surrogateescape")

        def join_text(parts: list[str]) -> bytes:
            return "".join(parts).encode("utf-8", "surrogateescape")

        return (text.splitlines(keepends=True) if phase == 0 else _TOKEN.findall(text)), join_text
    if job.kind == "onnx":
        import onnx

        try:
            model = onnx.load_from_string(job.data)
        except Exception:  # noqa: BLE001
            return None
        field_name = ("node", "initializer")[phase]
        base = model.SerializeToString()

        def join_model(parts: list) -> bytes:
            copy = onnx.load_from_string(base)
            getattr(copy.graph, field_name).clear()
            getattr(copy.graph, field_name).extend(parts)
            return copy.SerializeToString()

        return list(getattr(model.graph, field_name)), join_model
    if job.kind == "graphdef" and phase == 0:
        from tensorflow.core.framework import graph_pb2

        graph_def = graph_pb2.GraphDef()
        try:
            graph_def.ParseFromString(job.data)
        except Exception:  # noqa: BLE001
            return None
        base = graph_def.SerializeToString()

        def join_graph(parts: list) -> bytes:
            copy = graph_pb2.GraphDef()
            copy.ParseFromString(base)
            del copy.node[:]
            copy.node.extend(parts)
            return copy.SerializeToString()

        return list(graph_def.node), join_graph
    return None


# ------------------------------------------------------------------------------------- campaign


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


@dataclass
class Campaign:
    """Counts and state of one fuzzing run."""

    seed: int
    kinds: dict[str, float]
    save: bool = True
    counts: dict[str, Counter[str]] = field(default_factory=dict)
    crashes: dict[str, tuple[Job, Outcome]] = field(default_factory=dict)
    saved: list[Path] = field(default_factory=list)
    nondeterministic: int = 0


MUTATORS: dict[str, Callable[[bytes, random.Random, list[bytes]], bytes]] = {
    "gir": mutate_gir,
    "onnx": mutate_onnx,
    "graphdef": mutate_graphdef,
}
PIPELINES = {"gir": GIR_PIPELINES, "onnx": ONNX_PIPELINES, "graphdef": GRAPHDEF_PIPELINES}
SEEDS: dict[str, Callable[[], list[bytes]]] = {"gir": gir_seeds, "onnx": onnx_seeds, "graphdef": graphdef_seeds}


def run_campaign(
    kinds: dict[str, float],
    seed: int,
    seconds: float | None,
    runs: int | None,
    timeout: float = 20.0,
    memory_mb: int = 3072,
    save: bool = True,
    progress: Callable[[str], None] | None = None,
) -> Campaign:
    """Fuzz until ``seconds`` pass or ``runs`` inputs ran; ``kinds`` weighs the input kinds."""
    campaign = Campaign(seed, kinds, save)
    rng = random.Random(seed)
    corpora = {kind: SEEDS[kind]() for kind in kinds}
    seen: dict[str, set[str]] = {kind: set() for kind in kinds}
    worker = Worker(timeout, memory_mb)
    # Inputs that run through every stage: most mutants of a valid parent still fail to parse or
    # verify, so parents come from this pool 70% of the time to keep the passes and emitters busy.
    valid: dict[str, list[bytes]] = {
        kind: [
            seed for seed in corpora[kind] if classify(worker.run(Job(kind, seed, PIPELINES[kind][0]))).outcome == "ok"
        ]
        for kind in kinds
    }
    started = time.monotonic()
    done = 0
    weights = [kinds[k] for k in kinds]
    names = list(kinds)
    last_report = started
    try:
        while True:
            if runs is not None and done >= runs:
                break
            if seconds is not None and time.monotonic() - started >= seconds:
                break
            kind = rng.choices(names, weights)[0]
            corpus = corpora[kind]
            parent = rng.choice(valid[kind] if valid[kind] and rng.random() < 0.7 else corpus)
            data = MUTATORS[kind](parent, rng, corpus)
            args = rng.choice(PIPELINES[kind])
            if kind == "gir" and rng.random() < 0.1:
                args = (f"--passes={random_pipeline(rng)}", rng.choice(("--emit=gir", "--emit=summary")))
            job = Job(kind, data, args)
            outcome = classify(worker.run(job))
            done += 1
            campaign.counts.setdefault(kind, Counter())[outcome.outcome] += 1
            if outcome.outcome == "ok" and done % 97 == 0:  # determinism spot check
                first, again = worker.run(job), worker.run(job)
                if isinstance(first, dict) and isinstance(again, dict) and first["output_hash"] != again["output_hash"]:
                    campaign.nondeterministic += 1
            if outcome.outcome == "ok" and len(valid[kind]) < 1000 and rng.random() < 0.2:
                valid[kind].append(data)
            if outcome.key not in seen[kind]:
                seen[kind].add(outcome.key)
                if outcome.outcome in ("ok", "error") and len(corpus) < 2000 and len(data) < 200_000:
                    corpus.append(data)
            if outcome.outcome in ("crash", "hang") and outcome.key not in campaign.crashes:
                campaign.crashes[outcome.key] = (job, outcome)
                if progress:
                    progress(f"new {outcome.outcome} [{kind}] {outcome.key}: {outcome.line[:200]}")
                if save:
                    campaign.saved.append(_save_crash(job, outcome, worker))
            if progress and time.monotonic() - last_report > 60:
                last_report = time.monotonic()
                progress(f"{done} runs, {time.monotonic() - started:.0f}s: {_totals(campaign)}")
    finally:
        worker.close()
    campaign.counts = {k: campaign.counts.get(k, Counter()) for k in kinds}
    return campaign


def _totals(campaign: Campaign) -> str:
    return "; ".join(
        f"{kind} " + " ".join(f"{o}={campaign.counts.get(kind, Counter())[o]}" for o in OUTCOMES)
        for kind in campaign.kinds
    )


def _save_crash(job: Job, outcome: Outcome, worker: Worker) -> Path:
    """Minimise and write ``tests/data/crashes/<name>.<suffix>`` and ``<name>.expected``."""

    def same(candidate: Job) -> bool:
        return classify(worker.run(candidate)).key == outcome.key

    small = minimise(job, same) if outcome.outcome == "crash" else job
    slug = re.sub(r"[^A-Za-z0-9]+", "-", outcome.key).strip("-").lower()[:60]
    digest = hashlib.sha256(small.data).hexdigest()[:8]
    name = f"fuzz-{slug}-{digest}"
    CRASH_DIR.mkdir(parents=True, exist_ok=True)
    path = CRASH_DIR / f"{name}{SUFFIX[small.kind]}"
    path.write_bytes(small.data)
    (CRASH_DIR / f"{name}.expected").write_text(f"args: {shlex.join(small.args)}\nstderr:\n")
    return path


# ------------------------------------------------------------------------------------- CLI


def _markdown(campaign: Campaign, seconds: float, command: str) -> str:
    lines = [
        "# Fuzzing `graphir-opt` (tools/fuzz.py)",
        "",
        f"Command: `{command}` (seed {campaign.seed}), {seconds / 60:.1f} minutes of wall time on this machine "
        "(2 cores shared with other work; one worker process).",
        "",
        "| input kind | pipelines | runs | ok | clean error | crash | hang |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for kind in campaign.kinds:
        counts = campaign.counts.get(kind, Counter())
        pipes = "; ".join(" ".join(p) for p in PIPELINES[kind])
        total = sum(counts.values())
        lines.append(
            f"| {kind} | `{pipes}` | {total:,} | {counts['ok']:,} | {counts['error']:,} | "
            f"{counts['crash']:,} | {counts['hang']:,} |"
        )
    lines += [
        "",
        f"Determinism spot checks (every 97th successful run re-run twice): {campaign.nondeterministic} mismatches.",
    ]
    if campaign.crashes:
        lines += ["", "Crashes and hangs found (each saved under tests/data/crashes/):", ""]
        lines += [f"- `{key}`: {outcome.line[:200]}" for key, (_, outcome) in sorted(campaign.crashes.items())]
    else:
        lines += ["", "No crash and no hang."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (``python -m graphir.tools.fuzz``)."""
    parser = argparse.ArgumentParser(prog="graphir-fuzz", description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--minutes", type=float, help="stop after this many minutes")
    parser.add_argument("--runs", type=int, help="stop after this many inputs")
    parser.add_argument("--seed", type=int, default=1, help="seed of the mutation stream (default 1)")
    parser.add_argument("--kinds", default="gir=20,onnx=2,graphdef=0.5", help="input kinds and weights")
    parser.add_argument("--timeout", type=float, default=20.0, help="CPU seconds per input before it counts as a hang")
    parser.add_argument("--memory-mb", type=int, default=3072, help="worker resident memory limit (MiB)")
    parser.add_argument("--no-save", action="store_true", help="do not write reproducers")
    parser.add_argument("--report", type=Path, help="write the counts as Markdown to this file")
    args = parser.parse_args(argv)
    if args.worker:
        _worker_main()
        return 0
    if args.minutes is None and args.runs is None:
        parser.error("give --minutes or --runs")
    kinds = {}
    for item in args.kinds.split(","):
        name, _, weight = item.partition("=")
        if name not in MUTATORS:
            parser.error(f"unknown input kind '{name}' (known: {', '.join(MUTATORS)})")
        kinds[name] = float(weight or 1)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # the GraphDef seeds import TensorFlow's protos
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()

    def say(text: str) -> None:
        print(f"fuzz: {text}", file=sys.stderr, flush=True)

    campaign = run_campaign(
        kinds,
        args.seed,
        None if args.minutes is None else args.minutes * 60,
        args.runs,
        args.timeout,
        args.memory_mb,
        not args.no_save,
        say,
    )
    elapsed = time.monotonic() - started
    say(f"done in {elapsed:.0f}s: {_totals(campaign)}")
    for path in campaign.saved:
        say(f"reproducer: {path.relative_to(REPO_ROOT)}")
    if args.report:
        command = "python -m graphir.tools.fuzz " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
        args.report.write_text(_markdown(campaign, elapsed, command))
        say(f"wrote {args.report}")
    bad = sum(c["crash"] + c["hang"] for c in campaign.counts.values())
    print(json.dumps({k: dict(v) for k, v in campaign.counts.items()}))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
