"""Writing output files atomically, so a failed run never leaves a partial file behind."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from graphir.errors import GraphIRError


def write_atomically(path: Path, data: bytes | str, error: type[GraphIRError] = GraphIRError) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory, then rename it.

    The file gets the usual permissions (0666 less the umask; ``mkstemp`` alone would give 0600).
    A path that exists and is not a regular file (``/dev/null``, a FIFO, a terminal) is written in
    place: renaming over it would replace the device node itself with a regular file.

    Raises:
        GraphIRError: (or ``error``) the file cannot be written, in one line naming the path.
    """
    payload = data.encode() if isinstance(data, str) else data
    try:
        special = path.exists() and not path.is_file() and not path.is_dir()
    except OSError:
        special = False
    if special:
        try:
            with path.open("wb") as handle:
                handle.write(payload)
        except OSError as exc:
            raise error(f"cannot write '{path}': {exc.strerror or exc}") from None
        return
    directory = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    except OSError as exc:
        raise error(f"cannot write '{path}': {exc.strerror or exc}") from None
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise error(f"cannot write '{path}': {exc.strerror or exc}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
