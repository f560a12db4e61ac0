"""Calibrate device-pair communication in a fresh process and write a cluster TOML.

``python -m graphir.tools.calibrate_comm --cluster=2xcpu -o calibrated.toml`` (see
:mod:`graphir.passes.profile.calibrate_comm`; a fresh process can still configure TensorFlow's logical
CPU devices).
"""

import sys

from graphir.driver.clusters import resolve_file_or_host  # noqa: F401  (--cluster=FILE.toml, Nxcpu-workers)
from graphir.passes.profile.calibrate_comm import main

if __name__ == "__main__":
    sys.exit(main())
