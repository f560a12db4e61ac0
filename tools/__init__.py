"""Command-line entry points and developer tools (benchmarks, model generators)."""
