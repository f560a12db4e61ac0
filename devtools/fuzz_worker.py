"""The fuzzing harness's worker process, its limits, and the classification of its answers.

Part of :mod:`devtools.fuzz` (whose docstring describes the harness): :class:`Job` and
:class:`Outcome`, the worker loop (``python -m devtools.fuzz --worker`` runs
:func:`_worker_main`: pickled, length-prefixed jobs on stdin, answers on the original stdout),
:class:`Worker`, the parent's handle with the per-input CPU-time and resident-memory limits, and
:func:`classify`, which maps an answer to ``ok``/``error``/``crash``/``hang``.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import pickle
import re
import select
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from devtools import child_env

REPO_ROOT = Path(__file__).resolve().parents[1]
SUFFIX = {"gir": ".gir", "onnx": ".onnx", "graphdef": ".pb", "graphdef-run": ".pb", "onnx-run": ".onnx"}

OUTCOMES = ("ok", "error", "crash", "hang", "stray")

CANARY_DIR = Path(tempfile.gettempdir()) / "graphir-fuzz-canary"
"""An absolute directory the run seeds write into (and read from) when an op is allowed to run: the
worker checks after every job that nothing appeared there, nor in its own working directory (the
seeds' relative paths land there) nor beside the input and output files (a ``stray`` outcome)."""

RUN_CPUS = 2
"""Logical CPU devices the worker configures before TensorFlow starts (the run paths' ``2xcpu`` cluster)."""


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
    from graphir.driver import load_builtin_emitters

    load_builtin_emitters()
    from graphir.importers.tf import load_tensorflow

    load_tensorflow()  # once, before the first job: its import is not a job's time
    from graphir.backends.tf.check import configure_logical_cpus

    configure_logical_cpus(RUN_CPUS)  # before TensorFlow initialises: --run-tf on the 2xcpu cluster
    workdir = Path(tempfile.mkdtemp(prefix="graphir-fuzz-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    sandbox = workdir / "cwd"
    sandbox.mkdir()
    os.chdir(sandbox)  # a relative path a model writes to lands here
    CANARY_DIR.mkdir(parents=True, exist_ok=True)
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


def _files(folders: list[Path]) -> set[Path]:
    """Every file under ``folders`` (recursively; folders that do not exist hold none)."""
    return {path for folder in folders if folder.is_dir() for path in folder.rglob("*") if not path.is_dir()}


def _run_job(driver: object, job: Job, workdir: Path) -> dict[str, object]:
    """Run the driver on one input; report status, stderr, stdout digest, output survival and stray files."""
    path = workdir / f"input{SUFFIX[job.kind]}"
    path.write_bytes(job.data)
    output = workdir / "out.txt"
    output.write_text(_SENTINEL)
    watched = [workdir, CANARY_DIR]
    before = _files(watched)
    argv = [str(path), *job.args, "-o", str(output), "--debug"]
    stdout, stderr = io.StringIO(), io.StringIO()
    status: int | None = None
    escaped = ""
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            status = driver.run(argv)
        except BaseException:  # noqa: BLE001 - exactly what the fuzzer looks for
            escaped = traceback.format_exc()
    written = output.read_bytes() if output.is_file() else b""
    survived = written == _SENTINEL.encode()
    stray = sorted(str(p) for p in _files(watched) - before - {output, output.with_name(output.name + ".txt")})
    for name in stray:  # reported once; the next job starts clean
        Path(name).unlink(missing_ok=True)
    return {
        "stray": stray,
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
        env = child_env(TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="", PYTHONHASHSEED="0")
        return subprocess.Popen(
            [sys.executable, "-m", "devtools.fuzz", "--worker"],
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
    stray = answer.get("stray") or []
    if stray:  # a file written outside the output path: the worst outcome, whatever the status
        names = ", ".join(Path(str(name)).name for name in stray)
        return Outcome("stray", f"stray:status={status}:{names}"[:160], f"wrote {', '.join(map(str, stray))}", stderr)
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
