"""Replication suite: the papers' headline comparisons re-run on the zoo (``make replicate``).

One module per paper (``celeritas``, ``fastt``, ``pesto``, ``moirai``), each with ``main(argv) -> int``
writing its table under ``benchmarks/results/``; ``python -m devtools.replicate`` runs them all.
"""
