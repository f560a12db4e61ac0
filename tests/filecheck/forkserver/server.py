"""A fork server for the lit golden tests: ``graphir-opt`` without its start-up on every RUN line.

The lit tests run ``graphir-opt`` about 200 times, and each run spent most of its CPU time importing
graphir (numpy, the IR core, the driver, every built-in pass and emitter: 0.4-0.6 CPU s) before a
few milliseconds of work on a small ``.gir`` file. This server imports all of that once
(:func:`preload`: exactly what ``graphir-opt`` imports before it reads its input) and then forks a
copy of itself for each run. ``lit.cfg.py`` starts it and puts ``tests/filecheck/forkserver/`` first
on the tests' ``PATH``, where the ``graphir-opt`` client sends its arguments, working directory,
environment and standard streams (the file descriptors themselves, ``SCM_RIGHTS``) over a Unix
socket, and exits with the run's status.

Each run happens in a fresh fork: nothing one run changes (registries, plugins, globals) is seen by
another. The forked run is :func:`graphir.driver.main`, the console script's own entry point, with
``sys.argv``, ``os.environ``, the working directory and the three standard streams set to the
client's. What a fork cannot give is a fresh interpreter: the hash seed is the server's, and the
modules of :func:`preload` are imported before the run (``graphir-opt`` imports them all anyway
before it reads the input). The TensorFlow and ONNX importers and backends are not preloaded
(TensorFlow starts threads, which a fork must not inherit); a run that needs them imports them as
a fresh process would. ``GRAPHIR_LIT_FORKSERVER=0`` runs the tests with the real console script.

Protocol: the client connects, sends one JSON message (``argv``, ``cwd``, ``env``) with its fds 0, 1
and 2 attached, and reads one line back: the exit status (a negative number ``-N``: killed by signal
``N``). A handler process per connection (forked from the server) forks the run, waits for it and
writes the status, so the server itself never waits and never runs graphir code after the preload.

Usage: ``python server.py SOCKET``; prints ``ready`` on stdout once it listens, and exits when its
stdin reaches end of file (``lit.cfg.py`` holds the other end of that pipe).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import select
import signal
import socket
import sys
from typing import NoReturn

MAX_MESSAGE = 1 << 20
"""Bytes of the request message at most (argv, cwd and the environment)."""
CPU_LOG = os.environ.get("GRAPHIR_FORKSERVER_CPU_LOG", "")
"""Where to append each run's CPU seconds and arguments (the server's children are reaped by the
kernel, so no ``time`` of lit sees them); unset: nowhere."""


def preload() -> None:
    """Import what every ``graphir-opt`` run imports before it reads its input (driver, passes, emitters)."""
    import graphir.driver
    from graphir.driver import load_builtin_emitters, load_builtin_passes

    load_builtin_passes()
    load_builtin_emitters()
    assert graphir.driver.main


def _receive(connection: socket.socket) -> tuple[dict, list[int]]:
    """The request and its three file descriptors (one message; the client sends nothing else)."""
    data, fds, _flags, _address = socket.recv_fds(connection, MAX_MESSAGE, 3)
    if len(fds) != 3:
        raise RuntimeError(f"expected 3 file descriptors, got {len(fds)}")
    return json.loads(data), fds


def _standard_streams() -> None:
    """New ``sys.stdin``/``stdout``/``stderr`` on fds 0-2, configured as a fresh interpreter's are."""
    encoding = "utf-8"
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding=encoding)
    sys.stdout = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding=encoding, line_buffering=os.isatty(1)
    )
    sys.stderr = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(2, "w", closefd=False)),
        encoding=encoding,
        errors="backslashreplace",
        line_buffering=True,
    )
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr


def _run(request: dict, fds: list[int]) -> NoReturn:
    """In the forked run: take the client's streams, directory and environment, then be ``graphir-opt``."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = list(request["argv"])
    _standard_streams()
    from graphir.driver import main

    status = 1
    try:
        main()  # ends the process itself (graphir.driver.opt.exit_without_teardown)
    except SystemExit as exc:  # argparse's --help and usage errors
        code = exc.code
        status = code if isinstance(code, int) else (0 if code is None else 1)
        if not isinstance(code, int) and code is not None:
            print(code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - as the interpreter would: the traceback, status 1
        import traceback

        traceback.print_exc()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


def _handle(connection: socket.socket) -> NoReturn:
    """In the handler (forked per connection): fork the run, wait for it, send its status."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the server ignores it; this process waits
    status = 1
    try:
        request, fds = _receive(connection)
        pid = os.fork()
        if pid == 0:
            connection.close()
            _run(request, fds)
        for fd in fds:
            os.close(fd)
        _, wait_status, usage = os.wait4(pid, 0)
        status = os.waitstatus_to_exitcode(wait_status)
        if CPU_LOG:
            with open(CPU_LOG, "a", encoding="utf-8") as log:
                log.write(f"{usage.ru_utime + usage.ru_stime:.3f}\t{' '.join(request['argv'][1:])}\n")
    except BaseException as exc:  # noqa: BLE001 - the client reports it and fails
        print(f"graphir-opt fork server: {type(exc).__name__}: {exc}", file=sys.stderr)
        status = 1
    try:
        connection.sendall(f"{status}\n".encode())
    except OSError:
        pass
    os._exit(0)


def serve(path: str) -> None:
    """Listen on the Unix socket ``path`` until stdin closes; one handler process per connection.

    The server has one thread: it waits on the socket and on stdin together (``select``), so a
    fork never copies a process with other threads.
    """
    preload()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # handlers are reaped by the kernel
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    print("ready", flush=True)
    try:
        while True:
            readable, _, _ = select.select([listener, sys.stdin.fileno()], [], [])
            if sys.stdin.fileno() in readable and not os.read(sys.stdin.fileno(), 4096):
                return  # lit.cfg.py's end of the pipe closed: lit is done
            if listener in readable:
                connection, _ = listener.accept()
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    _handle(connection)
                connection.close()
    finally:
        with contextlib.suppress(FileNotFoundError):  # lit.cfg.py may have removed its folder first
            os.unlink(path)


if __name__ == "__main__":
    serve(sys.argv[1])
