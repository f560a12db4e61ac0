"""Multi-host runs on TensorFlow's distributed runtime: local ``tf.distribute.Server`` processes.

A cluster whose devices are ``/job:worker/task:0/device:CPU:0`` and ``/job:worker/task:1/device:CPU:0``
is run by :func:`start_local_servers`: one server process per task of the cluster's jobs, on free
ports picked at run time, addressed as ``127.0.0.1:PORT`` in the ``tf.train.ClusterSpec`` (so all
traffic stays on the loopback interface; the gRPC listener itself binds the port on every
interface, which TensorFlow's Python API does not let us narrow). A client session
(:class:`~graphir.backends.tf.session.SessionRunner` with ``target=servers.target``, the master of task
0) partitions the lowered graph by device and runs each partition on its task: TensorFlow's own
runtime and transport, nothing home-made.

The servers are children of the caller: each prints ``ready`` once listening, and exits when its
standard input closes (the parent closed it, or died) or after ``lifetime_s``; leaving the context
terminates them (SIGTERM, then SIGKILL after a bounded wait). Start-up is bounded by ``timeout_s``.
Each server starts in a session of its own (``setsid``), so Linux's autogroup scheduling
(``/proc/sys/kernel/sched_autogroup_enabled``, on by default) makes it a scheduling group of its
own, as a separate machine would be: in one group, the servers of a run share one group's CPU
weight among them. Measured on this 2-core machine under other sessions' load (23:25 UTC
2026-11-28, load 9-11; two pinned busy loops for 8 s): one loop alone got 3.1-3.3 CPU seconds,
two loops in the caller's group 1.6 each (one loop's share, split), two loops in groups of their
own 2.7 each. With the rig's workers in one group, a data-parallel step on two workers could not
beat one worker whenever other sessions kept the cores busy.
A server does not import Keras (``import tensorflow`` otherwise loads it, with pandas and matplotlib:
about a quarter of a server's start-up, 1.6 of 6.4 CPU s measured). The servers run with oneDNN's graph
rewrites off (``TF_ENABLE_ONEDNN_OPTS=0`` unless set), as
:mod:`graphir.backends.tf.check` does, so every op runs under its own name on its own device.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import IO, Any

from graphir.cluster import Cluster
from graphir.errors import BackendError

__all__ = ["LocalServers", "cluster_tasks", "free_ports", "run_step", "start_local_servers"]

_TASK_DEVICE = re.compile(r"^/job:([^/]+)/(?:replica:\d+/)?task:(\d+)(?:/device:([A-Za-z]+):(\d+))?$")

_SERVER_SCRIPT = """
import json, os, sys, threading, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
spec, job, task, cpus, lifetime, core, threads = json.loads(sys.argv[1])
if core is not None:  # taskset -c CORE: this process and every thread TensorFlow starts run on one core
    os.sched_setaffinity(0, {core})
# A server runs graphs it is sent and no Python model code: Keras, which `import tensorflow` loads eagerly
# (inside a try that skips it when it cannot be imported), with pandas and matplotlib, stays out.
sys.modules["keras"] = None
import tensorflow as tf
config = tf.compat.v1.ConfigProto(device_count={"CPU": cpus})
if threads:  # the worker's kernel (intra-op) and executor (inter-op) pools
    config.intra_op_parallelism_threads = threads
    config.inter_op_parallelism_threads = threads
server = tf.distribute.Server(tf.train.ClusterSpec(spec), job_name=job, task_index=task, protocol="grpc",
                              config=config, start=True)
print("ready", flush=True)
def watch():
    sys.stdin.read()
    os._exit(0)
threading.Thread(target=watch, daemon=True).start()
time.sleep(lifetime)
os._exit(0)
"""


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on 127.0.0.1 right now (the OS picks them)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def cluster_tasks(cluster: Cluster) -> dict[tuple[str, int], int]:
    """``(job, task) -> CPU devices the task needs`` for every task the cluster's devices name.

    Raises:
        BackendError: a device string without ``/job:J/task:K``, or a non-CPU device (local
            servers have CPUs only).
    """
    tasks: dict[tuple[str, int], int] = {}
    for device in cluster.devices:
        match = _TASK_DEVICE.match(device.tf_device)
        if match is None:
            raise BackendError(
                f"device '{device.name}' ({device.tf_device}) names no /job:J/task:K; "
                "a multi-host cluster needs one on every device"
            )
        job, task, kind, index = match.group(1), int(match.group(2)), match.group(3), match.group(4)
        if kind is not None and kind.upper() != "CPU":
            raise BackendError(f"device '{device.name}' ({device.tf_device}): local servers provide CPU devices only")
        need = int(index) + 1 if index is not None else 1
        tasks[(job, task)] = max(tasks.get((job, task), 1), need)
    jobs: dict[str, int] = {}
    for job, task in tasks:
        jobs[job] = max(jobs.get(job, 0), task + 1)
    for job, count in jobs.items():  # a job's task list is dense: tasks the devices skip still run
        for task in range(count):
            tasks.setdefault((job, task), 1)
    return dict(sorted(tasks.items()))


@dataclasses.dataclass
class LocalServers:
    """Running local servers.

    Attributes:
        cluster_spec: ``{job: ["127.0.0.1:PORT", ...]}``.
        processes: ``(job, task) -> server process``.
    """

    cluster_spec: dict[str, list[str]]
    processes: dict[tuple[str, int], subprocess.Popen[str]]

    @property
    def target(self) -> str:
        """The session target: the first task of the first job (its master)."""
        job = sorted(self.cluster_spec)[0]
        return f"grpc://{self.cluster_spec[job][0]}"

    @property
    def master_task(self) -> str:
        """``/job:J/task:0`` of :attr:`target`: the task a session's feeds enter by."""
        return f"/job:{sorted(self.cluster_spec)[0]}/task:0"

    def troubled(self) -> str:
        """The servers that died or are stopped, as one clause (``""`` when every one is running).

        A stopped process (state ``T``, e.g. ``SIGSTOP``) or one in uninterruptible sleep for long
        (``D``) answers nothing: it is what a hung worker looks like from outside.
        """
        parts = []
        for (job, task), process in self.processes.items():
            code = process.poll()
            where = f"/job:{job}/task:{task} (pid {process.pid})"
            if code is not None:
                how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
                parts.append(f"worker {where} died ({how})")
            elif _process_state(process.pid) in ("T", "t"):
                parts.append(f"worker {where} hung (stopped)")
        return "; ".join(parts)

    def close(self, wait_s: float = 10.0) -> None:
        """Stop every server (close its stdin, SIGTERM, SIGKILL after ``wait_s``).

        A stopped server is continued after its SIGTERM, so it ends at once rather than at the
        SIGKILL.
        """
        for process in self.processes.values():
            with contextlib.suppress(OSError):
                if process.stdin is not None:
                    process.stdin.close()
            if process.poll() is None:
                process.terminate()
                with contextlib.suppress(OSError):
                    os.kill(process.pid, signal.SIGCONT)
        deadline = time.monotonic() + wait_s
        for process in self.processes.values():
            try:
                process.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=wait_s)
            if process.stdout is not None:
                process.stdout.close()


@contextlib.contextmanager
def start_local_servers(
    cluster: Cluster,
    timeout_s: float = 120.0,
    lifetime_s: float = 3600.0,
    cores: Sequence[int] | None = None,
    threads: int | None = None,
    environment: Mapping[str, str] | None = None,
) -> Iterator[LocalServers]:
    """Start one ``tf.distribute.Server`` process per task of ``cluster`` on 127.0.0.1; stop them on exit.

    Args:
        cluster: a cluster whose devices are ``/job:J/task:K/device:CPU:N``.
        timeout_s: bound on the start-up of all servers.
        lifetime_s: a server exits by itself after this long, whatever happens to its parent.
        cores: pin the i-th task (in ``(job, task)`` order) to core ``cores[i % len(cores)]`` (the
            effect of ``taskset -c``, set in the child before TensorFlow starts a thread);
            ``None``: no pinning.
        threads: the servers' intra- and inter-op thread counts (``None``: TensorFlow's default).
        environment: variables set in the servers' environment (over the caller's).

    Raises:
        BackendError: a server that exits or is not ready within ``timeout_s`` (its last output quoted).
    """
    tasks = cluster_tasks(cluster)
    ports = free_ports(len(tasks))
    spec: dict[str, list[str]] = {}
    for (job, _task), port in zip(tasks, ports, strict=True):
        spec.setdefault(job, []).append(f"127.0.0.1:{port}")
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    env.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # oneDNN fuses ops (Pad into Conv2D) under new names
    env.update(environment or {})
    servers = LocalServers(spec, {})
    try:
        for position, ((job, task), cpus) in enumerate(tasks.items()):
            core = cores[position % len(cores)] if cores else None
            argument = json.dumps([spec, job, task, cpus, lifetime_s, core, threads])
            servers.processes[(job, task)] = subprocess.Popen(
                [sys.executable, "-c", _SERVER_SCRIPT, argument],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=env,
                start_new_session=True,  # its own scheduling group (module docstring)
            )
        _wait_ready(servers, timeout_s)
        yield servers
    finally:
        servers.close()


def _process_state(pid: int) -> str:
    """The state letter of ``/proc/PID/stat`` (``R``, ``S``, ``T``...), ``""`` when unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def _wait_ready(servers: LocalServers, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    waiting = dict(servers.processes)
    output: dict[tuple[str, int], list[str]] = {key: [] for key in waiting}
    with selectors.DefaultSelector() as selector:
        streams: dict[tuple[str, int], IO[str]] = {}
        for key, process in waiting.items():
            stream = process.stdout
            assert stream is not None, "the servers start with stdout=PIPE"
            streams[key] = stream
            selector.register(stream, selectors.EVENT_READ, key)
        while waiting:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                key = next(iter(waiting))
                raise BackendError(
                    f"TF server /job:{key[0]}/task:{key[1]} not ready after {timeout_s:g} s{_tail(output[key])}"
                )
            for event, _ in selector.select(timeout=min(remaining, 1.0)):
                key = event.data
                line = streams[key].readline()  # (the event's file object)
                if line.strip() == "ready":
                    selector.unregister(event.fileobj)
                    waiting.pop(key, None)
                elif line:
                    output[key].append(line.rstrip())
                else:
                    selector.unregister(event.fileobj)
                    code = servers.processes[key].wait(timeout=5)
                    raise BackendError(
                        f"TF server /job:{key[0]}/task:{key[1]} exited with status {code}{_tail(output[key])}"
                    )


def _tail(lines: list[str]) -> str:
    text = " | ".join(line for line in lines[-3:] if line)
    return f": {text[-300:]}" if text else ""


def run_step(module: Any, lowered: Any, servers: LocalServers, inputs: Any, **kwargs: Any) -> Any:
    """One traced step of ``lowered`` on ``servers``: ``(outputs, {op: device})``.

    ``kwargs`` go to :class:`~graphir.backends.tf.session.SessionRunner` (``variables``, ``timeout_s``).
    """
    from graphir.backends.tf.session import SessionRunner

    with SessionRunner(module, lowered, servers.target, **kwargs) as runner:
        return runner.run_traced(inputs)
