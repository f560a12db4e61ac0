"""The driver: the layer that loads everything and runs it, above the passes and the backends.

graphir is layered; each layer imports only the layers below it::

    graphir.tools      the product's other command lines (graphir-bench, graphir-tune, the zoo, the demo)
    graphir.driver     this layer: graphir-opt, the built-in passes and emitters, cluster resolution
    graphir.passes     the passes
    graphir.backends   the emitters and runners (TensorFlow, reports, JSON), the host machine
    graphir            the core: IR, types, text format, verifier, pass infrastructure, op
                       definitions, cluster model, links, memory, simulator, importers

The core's registries are filled from above: a pass registers itself when its module is imported,
a backend its emitters, a plugin through its entry point (groups ``graphir.passes`` and
``graphir.sources``). This layer is where the built-in ones are named and imported:

* :mod:`graphir.driver.builtin`: :func:`load_builtin_passes` and :func:`load_builtin_emitters`;
* :mod:`graphir.driver.clusters`: cluster specs that need a file, a cache or this machine's CPU
  (``cluster.toml``, ``Nxcpu``, ``Nxcpu-workers``), registered with the core's resolver hook
  (:func:`graphir.cluster.register_cluster_resolver`) when this package is imported;
* :mod:`graphir.driver.opt`: the ``graphir-opt`` command line (:func:`main`, :func:`run`), also
  ``python -m graphir.driver``.

From Python, ``import graphir.driver`` gives what ``graphir-opt`` has: call
:func:`load_builtin_passes` (or ``import graphir.passes``) before parsing a pipeline, and
:func:`load_builtin_emitters` before looking up an emitter. Importing only the core
(``graphir.ir``, ``graphir.parser``, ``graphir.pass_manager``) works on its own: the preset and
shorthand clusters resolve there, a file or host cluster needs this layer (or
``Module.set_cluster``).
"""

from graphir.driver import clusters  # noqa: F401  (registers the resolver of file and host clusters)
from graphir.driver.builtin import load_builtin_emitters, load_builtin_passes
from graphir.driver.opt import main, run

__all__ = ["load_builtin_emitters", "load_builtin_passes", "main", "run"]
