"""Backends: emitters that turn a module into files (JSON cost graph, summary, later TF and reports)."""
